# `snakemake --report report.html`: every output marked with report(...) (tables as CSV, figures as PNG),
# each with a caption from workflow/report/*.rst, grouped by category (study) and subcategory.


report: "../report/workflow.rst"
