# Input functions, wildcard patterns and output lists of the provenance stage (its rules: ../provenance.smk).

from stressprobe.provenance import git_commit


def provenance_areas():
    """The results areas this config writes; each gets a provenance record."""
    areas = ["tables", "figures"]
    if judging_enabled():
        areas += ["data", "personas", "judging", "analysis"]
    if cdv_enabled():
        areas += ["cdv"]
    return sorted(areas)


def provenance_outputs():
    return expand("results/{area}/provenance.json", area=provenance_areas())
