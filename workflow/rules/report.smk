# `snakemake --report report.html`: every output marked with report(...) (tables as CSV, figures as PNG),
# each with a caption from workflow/report/*.rst, grouped by category (study) and subcategory.


report: "../report/workflow.rst"


# A finished run ends on where its results are, not only on Snakemake's step count.
onsuccess:
    from stressprobe.run_summary import where_results_are

    for line in where_results_are(final_outputs()):
        print(line, file=sys.stderr)
