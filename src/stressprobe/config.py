"""Config validation: JSON Schema with defaults, reported as one line naming the key."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from stressprobe.errors import StressprobeError


def _with_defaults(validator_class):
    """A validator that also fills in each property's `default` while it validates."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if isinstance(subschema, dict) and "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": set_defaults})


DefaultFillingValidator = _with_defaults(Draft202012Validator)


def load_schema(schema_path: str | Path) -> tuple[dict, Registry]:
    """Load the root schema and every sibling `*.schema.yaml` it may `$ref` by file name."""
    schema_path = Path(schema_path)
    resources = []
    for path in sorted(schema_path.parent.glob("*.schema.yaml")):
        contents = yaml.safe_load(path.read_text(encoding="utf-8"))
        # jsonschema switches to a plain validator class for a resource that declares `$schema`, which
        # would silently skip filling that section's defaults: all files are 2020-12 anyway.
        contents.pop("$schema", None)
        resources.append((path.name, Resource.from_contents(contents, default_specification=DRAFT202012)))
    root = yaml.safe_load(schema_path.read_text(encoding="utf-8"))
    return root, Registry().with_resources(resources)


def _key(path) -> str:
    return ".".join(str(part) for part in path) or "<top level>"


def validate_config(config: dict[str, Any], schema_path: str | Path) -> dict[str, Any]:
    """Validate `config` in place (defaults filled) and check that every model it names is registered.

    Raises StressprobeError with one line: the offending key, what was wrong, and what to fix.
    """
    schema, registry = load_schema(schema_path)
    validator = DefaultFillingValidator(schema, registry=registry)
    # Two passes: the first fills defaults of nested sections, the second reports on the completed config.
    list(validator.iter_errors(config))
    error = best_match(validator.iter_errors(config))
    if error is not None:
        raise StressprobeError(
            f"config key '{_key(error.absolute_path)}': {error.message}; "
            f"see {Path(schema_path).parent} for the allowed keys and types"
        )
    for key, name in referenced_models(config):
        if name not in config.get("models", {}):
            known = ", ".join(sorted(config.get("models", {}))) or "none"
            raise StressprobeError(
                f"config key '{key}': model '{name}' is not in the 'models' registry (known: {known}); "
                "add it under 'models' or fix the name"
            )
    return config


def referenced_models(config: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Yield `(config key, model name)` for every place the config names a model of the registry."""
    judging = config.get("judging", {})
    for i, name in enumerate(judging.get("models", [])):
        yield f"judging.models[{i}]", name
    if judging.get("summarizer"):
        yield "judging.summarizer", judging["summarizer"]
    cdv = config.get("cdv", {})
    for i, cell in enumerate(cdv.get("cells", [])):
        for role in ("proxy", "victim"):
            if cell.get(role):
                yield f"cdv.cells[{i}].{role}", cell[role]
    for i, name in enumerate(cdv.get("eval_models", [])):
        yield f"cdv.eval_models[{i}]", name
    for key in ("semantic_model", "baseline_model"):
        if cdv.get(key):
            yield f"cdv.{key}", cdv[key]
    if cdv.get("prompts", {}).get("extract_model"):
        yield "cdv.prompts.extract_model", cdv["prompts"]["extract_model"]
    classifier_model = cdv.get("classifier", {}).get("model")
    if classifier_model:
        yield "cdv.classifier.model", classifier_model
    yield from cdv_experiment_models(cdv)


def cdv_experiment_models(cdv: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The models named by the CDV experiments, the classifier study and the cost experiment."""
    for name, experiment in sorted(cdv.get("experiments", {}).items()):
        for i, cell in enumerate(experiment.get("cells", [])):
            for role in ("proxy", "victim"):
                if cell.get(role):
                    yield f"cdv.experiments.{name}.cells[{i}].{role}", cell[role]
        for i, model in enumerate(experiment.get("eval_models") or []):
            yield f"cdv.experiments.{name}.eval_models[{i}]", model
    classifier = cdv.get("classifier", {})
    for i, model in enumerate(classifier.get("prompt_models", [])):
        yield f"cdv.classifier.prompt_models[{i}]", model
    for i, cell in enumerate(classifier.get("label_cells", [])):
        for role in ("proxy", "victim"):
            if cell.get(role):
                yield f"cdv.classifier.label_cells[{i}].{role}", cell[role]
    cost = classifier.get("cost_study") or {}
    for role in ("proxy", "victim"):
        if cost.get(role):
            yield f"cdv.classifier.cost_study.{role}", cost[role]
    for i, victim in enumerate((classifier.get("table2") or {}).get("victims", [])):
        yield f"cdv.classifier.table2.victims[{i}]", victim
    human = cdv.get("human_eval") or {}
    for role in ("proxy", "victim"):
        if human.get(role):
            yield f"cdv.human_eval.{role}", human[role]
    for i, model in enumerate(cdv.get("dpo", {}).get("compare_models", [])):
        yield f"cdv.dpo.compare_models[{i}]", model
    for i, model in enumerate(cdv.get("benchmark", {}).get("models", [])):
        yield f"cdv.benchmark.models[{i}]", model
    for model in sorted(cdv.get("eval", {}).get("model_max_tokens", {})):
        yield f"cdv.eval.model_max_tokens.{model}", model
