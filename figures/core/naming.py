"""A figure's name on the command line: ``stagewise figure ID`` takes a figure's id,
``stagewise compare NAME`` a comparison's id ``compare-NAME`` without its prefix. Kept apart from
``figures.core.figure`` so that ``stagewise list`` needs no matplotlib."""

COMPARISON_PREFIX = "compare-"


def command_name(figure_id: str, kind: str) -> str:
    """The name on the command line: the id, or for a comparison the name after compare-."""
    return figure_id.removeprefix(COMPARISON_PREFIX) if kind == "comparison" else figure_id


def figure_id(name: str, kind: str) -> str:
    """The id that ``command_name`` names ``name``."""
    return f"{COMPARISON_PREFIX}{name}" if kind == "comparison" else name
