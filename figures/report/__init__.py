"""The reproduction report (issue 16): ``stagewise reproduce`` runs the figures, ``stagewise
report DIR`` writes ``DIR/index.html`` and ``DIR/REPORT.md`` from the stored runs."""
