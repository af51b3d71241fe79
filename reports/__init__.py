"""Reports built from the results database alone: tables, figures, HTML and Markdown.

`reports.build.build_report` is the entry point. Nothing here is imported eagerly, so
importing the package does not pull in matplotlib.
"""
