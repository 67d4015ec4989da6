# Input functions of the pinned sources (their rule: ../sources.smk); see stressprobe.fetch.

from stressprobe import fetch as _fetch

stop_on_error(_fetch.check_sources, config["sources"])


def source_file(value, config_key):
    """The file a file key means: a path as given, or the pinned source's (local copy or fetched file)."""
    return _fetch.resolve(value, config["sources"], config_key)


def fetched_sources():
    """Sources a download job fetches (those given by URL, not by a local path)."""
    return sorted(name for name, entry in config["sources"].items() if entry.get("url"))


def source_param(key):
    """A download job's setting `key` (url, sha256, url_key, sha256_key) from its {source} wildcard."""

    def param(wildcards):
        entry = config["sources"][wildcards.source]
        url_key, sha256_key = _fetch.source_keys(wildcards.source)
        return {**entry, "url_key": url_key, "sha256_key": sha256_key}[key]

    return param


FETCHED_SOURCE_RE = _alternation(fetched_sources())
