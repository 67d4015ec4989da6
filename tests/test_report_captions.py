"""Report captions render as Snakemake renders them (Jinja2, then docutils) without any docutils message.

`|…|` in reStructuredText is a substitution reference: a caption that writes `mean |Δr|` makes
`snakemake --report` print "Undefined substitution referenced" and show the error inside the report.
Every caption under workflow/report/ is checked, including ones added later.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from docutils.core import publish_parts
from jinja2 import Environment, StrictUndefined
from snakemake.iocontainers import Wildcards

from stressprobe.config import validate_config

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = sorted((ROOT / "workflow" / "report").glob("*.rst"))
# What Snakemake appends to every caption before rendering (links to its panels; no categories here).
RST_LINKS = """

.. _Workflow: javascript:show_panel('workflow')
.. _Statistics: javascript:show_panel('statistics')
"""


def demo_config() -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return validate_config(config, ROOT / "workflow" / "schemas" / "config.schema.yaml")


def rendered_messages(text: str, context: SimpleNamespace) -> tuple[str, str]:
    """The caption's HTML body and every docutils message of level warning or above."""
    # Snakemake's own environment (trim_blocks, lstrip_blocks); undefined names fail here instead of
    # rendering as nothing.
    env = Environment(trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
    source = env.from_string(text + RST_LINKS).render(snakemake=context, categories={}, files=[])
    messages = io.StringIO()
    body = publish_parts(
        source,
        writer="html",
        settings_overrides={"report_level": 2, "halt_level": 5, "warning_stream": messages},
    )["body"]
    return body, messages.getvalue()


def test_there_are_captions():
    assert len(CAPTIONS) >= 10


@pytest.mark.parametrize("caption", CAPTIONS, ids=lambda p: p.name)
def test_caption_renders_without_docutils_messages(caption):
    wildcards = Wildcards(fromdict={"cdv_table": "cdv_search", "dataset": "demo-mmlu"})
    context = SimpleNamespace(config=demo_config(), wildcards=wildcards, params={}, input=[], output=[])
    body, messages = rendered_messages(caption.read_text(encoding="utf-8"), context)
    assert messages == "", f"{caption.name}: {messages}"
    assert "problematic" not in body and "system-message" not in body


def test_absolute_values_render_as_bars_not_substitutions():
    context = SimpleNamespace(config={}, wildcards={})
    body, messages = rendered_messages(r"mean \|Δr(s, p)\| and \|ΔnDCG@10\|", context)
    assert messages == ""
    assert "mean |Δr(s, p)| and |ΔnDCG@10|" in html.unescape(body)
    # The unescaped form is what the test guards against.
    _, messages = rendered_messages("mean |Δr| over systems", context)
    assert "Undefined substitution referenced" in messages
