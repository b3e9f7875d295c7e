"""Command-line fuzz (issue 14, item 6): random options for every command and target must end in
exit 0, exit 1 with a divergence line, or exit 2 with exactly one stderr line, never a traceback,
and must change no file outside the output directory.

``figures.cli.main(argv)`` runs in-process. The option names and types come from the config
dataclasses the parsers are built from (flattened as ``figures.cli.commands`` flattens them);
values are drawn per type: non-finite, huge, tiny, negative, wrong-type, empty, duplicated
options, and existing files, non-empty directories, corrupt stored runs etc. as paths.

Stubbed, so that a valid configuration does not train or compute (minutes each): a figure's or
comparison's ``compute`` (the registry hands out copies of the declared ``Figure`` whose
``compute`` raises ``ComputeReached``; ``Figure.run`` itself stays real, so its output checks,
lock and ``--replot`` reading run), an experiment's ``run`` (copies in ``EXPERIMENTS``; the CLI
checks the output directory and reads a ``--resume`` directory's config before it), and the
sweep's ``simulate.sweep._run_sweep`` (grid parsing, point validation, the output check and
the lock stay real). Reaching a stub counts as exit 0. Hence a check made only inside
compute (data generation, ``train``, e.g. of a ``--resume`` checkpoint) is not fuzzed here;
``derive`` and ``list`` are not stubbed.

Paths are made per case under a fresh temporary directory (the working directory one of them);
a read-only parent stops no one running as root. Failures are collected over all examples and
reported grouped (exception type and last frame) instead of stopping at the first, so that one
run lists every distinct traceback; a failure's printed argv reproduces it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import re
import signal
import stat
import traceback
import types
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import figures.registry
import simulate.sweep
from figures.cli import SweepOptions, main
from figures.core.options import Flat
from simulate.experiments import EXPERIMENTS
from simulate.runner import RunOutput

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ("figure", "compare", "run", "sweep", "derive", "list")
CASE_SECONDS = 30
"""a case running longer is reported as a hang (a parse or a validation must be quick)."""
QUIET_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)
"""warning categories Python does not print by default; any other is a stderr line."""


class ComputeReached(Exception):
    """Raised by the stubs: validation passed and the work would start here."""


def _reached(*args: Any, **kwargs: Any) -> Any:
    raise ComputeReached


@dataclass(frozen=True)
class Option:
    flag: str
    """``--name`` as tyro spells it (underscores as dashes, nested non-flat fields dotted)."""
    hint: Any


@dataclass(frozen=True)
class Target:
    command: str
    name: str | None
    """the subcommand (figure id, comparison, experiment, system); None for list."""
    stored_id: str | None
    """the ``experiment`` entry of a run directory it writes (for fake stored runs)."""
    options: tuple[Option, ...]

    @property
    def label(self) -> str:
        return f"{self.command} {self.name}" if self.name else self.command


def _flat_options(cls: type, prefix: str = "") -> list[Option]:
    hints = typing.get_type_hints(cls, include_extras=True)
    options = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        hint, meta = hints[f.name], ()
        if typing.get_origin(hint) is typing.Annotated:
            hint, *meta = typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            nested = prefix if any(m is Flat for m in meta) else f"{prefix}{f.name}."
            options += _flat_options(hint, nested)
        else:
            options.append(Option("--" + (prefix + f.name).replace("_", "-"), hint))
    return options


def targets() -> list[Target]:
    """Every subcommand of every command, with its options (``figures.cli.commands``' layout)."""
    from figures.derive import SYSTEMS
    from figures.registry import all_figures, comparisons

    def target(command, name, stored_id, *configs):
        options = tuple(o for c in configs for o in _flat_options(c))
        return Target(command, name, stored_id, options)

    found = [target("list", None, None)]
    found += [target("figure", f.id, f.id, f.config) for f in all_figures().values()]
    found += [target("compare", n, f.id, f.config) for n, f in comparisons().items()]
    found += [target("run", n, n, e.config, RunOutput) for n, e in EXPERIMENTS.items()]
    found += [target("sweep", n, n, e.config, SweepOptions) for n, e in EXPERIMENTS.items()]
    found += [target("derive", n, None, s.config) for n, s in SYSTEMS.items()]
    return found


# --- values ---------------------------------------------------------------------------------
PATH_KINDS = (
    "fresh",  # a path that does not exist yet (nor its parent)
    "empty",  # an existing empty directory
    "full",  # an existing non-empty directory
    "file",  # an existing text file
    "bytes",  # a file of random bytes
    "read-only",  # a new directory in a read-only parent
    "under-file",  # a path below an existing file
    "stored",  # a (fake, often corrupt) stored run of this target
    "default",  # runs, relative to the working directory
)


@dataclass(frozen=True)
class PathRef:
    kind: str


@dataclass(frozen=True)
class Token:
    """One option as drawn: its flag, and its values (none for a flag, several for a tuple)."""

    flag: str
    option: Option | None
    """the option drawn (None for a ``--grid`` of the sweep)."""
    values: tuple[str | PathRef, ...]
    joined: bool
    """``--flag=value`` rather than ``--flag value``."""


WRONG = st.sampled_from(["", "x", "1,2", "true", "None", "0x10", "1_000", " 1", "½", "-", "--"])
BAD_INTS = st.sampled_from(
    ["-1", "-7", str(2**31), str(2**32), str(2**63), str(10**30), str(-(2**63)), "1e3", "1.5"]
)
BAD_FLOATS = st.sampled_from(
    ["nan", "inf", "-inf", "0", "-0.0", "-1", "1e308", "-1e308", "1e-320", "1e400", "NaN"]
)
MOSTLY_ONE = st.one_of(st.just(1), st.just(1), st.integers(0, 3))
TEXTS = st.one_of(
    st.sampled_from(["", "1,2", "a b", "../x", "%s", "{}", "None"]),
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8),
)


def _optional(hint: Any) -> tuple[Any, bool]:
    """(the hint without None, whether None was allowed)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) < len(typing.get_args(hint)) and len(args) == 1:
            return args[0], True
    return hint, False


def _good(hint: Any) -> st.SearchStrategy:
    """Plausible values of a scalar field of type ``hint``."""
    if hint is bool:
        return st.sampled_from(["true", "false"])
    if hint is int:
        return st.integers(0, 12).map(str) | st.sampled_from(["100", "1000", "10000"])
    if hint is float:
        return st.floats(1e-3, 10).map(repr) | st.sampled_from(["0.5", "1", "2", "1e-3"])
    if hint is Path:
        return st.sampled_from(PATH_KINDS).map(PathRef)
    if typing.get_origin(hint) is typing.Literal:
        return st.sampled_from([str(c) for c in typing.get_args(hint)])
    return TEXTS


def _scalar(hint: Any) -> st.SearchStrategy:
    """Values of a field of type ``hint``: plausible ones mostly (so that valid configurations
    are reached), otherwise out of range, non-finite, huge or of the wrong type."""
    good = _good(hint)
    if hint is int:
        return st.one_of(good, good, good, BAD_INTS, WRONG)
    if hint is float:
        return st.one_of(good, good, good, BAD_FLOATS, BAD_INTS, WRONG)
    return st.one_of(good, good, good, WRONG, TEXTS)


@st.composite
def _token(draw, option: Option) -> Token:
    hint, nullable = _optional(option.hint)
    if nullable and draw(st.integers(0, 5)) == 0:
        return Token(option.flag, option, ("None",), draw(st.booleans()))
    if hint is bool:
        form = draw(st.integers(0, 4))
        if form == 4:  # a value where a flag is expected
            return Token(option.flag, option, (draw(_scalar(bool)),), draw(st.booleans()))
        flag = option.flag if form < 2 else "--no-" + option.flag.removeprefix("--")
        return Token(flag, option, (), False)
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        element = args[0] if args else str
        values = draw(st.lists(_scalar(element), max_size=4))
        return Token(option.flag, option, tuple(values), False)
    return Token(option.flag, option, (draw(_scalar(hint)),), draw(st.booleans()))


@dataclass(frozen=True)
class Stored:
    """What a fake stored run directory holds (drawn)."""

    config: str | None
    summary: str | None
    trajectory: str | None
    checkpoint: str | None


JUNK_JSON = st.sampled_from(["", "{", '{"experiment": "', "[]", "null", "{}", "\x00\xff"])


@st.composite
def _stored(draw, target: Target) -> Stored:
    fields = [o.flag.removeprefix("--").replace("-", "_") for o in target.options]
    junk = st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=4), st.just([1]))
    values = draw(st.dictionaries(st.sampled_from(fields or ["x"]), junk, max_size=3))
    experiment = draw(st.sampled_from([target.stored_id or "list", "not-this-one"]))
    config = draw(
        st.one_of(
            st.none(),
            JUNK_JSON,
            st.just(json.dumps({"experiment": experiment, "config": {}})),
            st.just(json.dumps({"experiment": experiment, "config": values})),
            st.just(json.dumps({"experiment": experiment})),
        )
    )
    summary = draw(st.one_of(st.none(), JUNK_JSON, st.just('{"status": "complete"}')))
    trajectory = draw(st.sampled_from([None, "dir", "file"]))
    checkpoint = draw(st.one_of(st.none(), JUNK_JSON, st.just('{"step": 100}')))
    return Stored(config, summary, trajectory, checkpoint)


@dataclass(frozen=True)
class Case:
    target: Target
    tokens: tuple[Token, ...]
    extra: tuple[str, ...]
    """stray arguments (unknown options, positionals)."""
    random_bytes: bytes
    stored: Stored


@st.composite
def cases(draw, pool: list[Target]) -> Case:
    """A target of ``pool``, its options with drawn values, stray arguments, fixtures."""
    target = draw(st.sampled_from(pool))
    tokens = []
    if target.options:
        for option in draw(st.lists(st.sampled_from(target.options), max_size=5)):
            tokens.append(draw(_token(option)))
        if tokens and draw(st.integers(0, 3)) == 0:  # the same option again, another value
            again = draw(st.sampled_from(tokens)).option
            assert again is not None  # only the sweep's --grid has none, drawn below
            tokens.append(draw(_token(again)))
    if target.command == "sweep":
        tokens += [draw(_grid(target)) for _ in range(draw(MOSTLY_ONE))]
    stray = st.sampled_from(["--no-such-option", "stray", "--", "-h5", "--out"])
    extra = [draw(stray)] if draw(st.integers(0, 7)) == 0 else []
    return Case(
        target,
        tuple(tokens),
        tuple(extra),
        draw(st.binary(min_size=0, max_size=64)),
        draw(_stored(target)),
    )


@st.composite
def _grid(draw, target: Target) -> Token:
    """A ``--grid`` with KEY=V1,V2 items: mostly the experiment's own scalar fields with
    plausible values, sometimes any option, a malformed item or a bad value."""
    own = {o.flag for o in _flat_options(SweepOptions)}
    scalars = [o for o in target.options if _optional(o.hint)[0] != Path]
    keys = [o for o in scalars if o.flag not in own]
    items = []
    for _ in range(draw(MOSTLY_ONE)):
        option = draw(st.sampled_from(keys) | st.sampled_from(scalars))
        hint = _optional(option.hint)[0]
        good = st.lists(_good(hint), min_size=1, max_size=3, unique=True)
        values = draw(good | good | st.lists(_scalar(hint), max_size=3))
        joined = ",".join(map(str, values))
        key = option.flag.removeprefix("--")
        items.append(draw(st.sampled_from([f"{key}={joined}"] * 4 + [key, f"={joined}"])))
    return Token("--grid", None, tuple(items), False)


# --- running a case ---------------------------------------------------------------------------
def _materialize(case: Case, root: Path) -> dict[str, Path]:
    """Create the fixtures the path kinds name under ``root``; the path of each kind."""
    (root / "empty").mkdir()
    (root / "full").mkdir()
    (root / "full" / "notes.txt").write_text("a user's file\n")
    (root / "file.txt").write_text("a user's file\n")
    (root / "random.bin").write_bytes(case.random_bytes)
    (root / "ro").mkdir()
    stored = root / "stored"
    dirs = [stored, stored / (case.target.stored_id or "x")]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        for name, text in [
            ("config.json", case.stored.config),
            ("summary.json", case.stored.summary),
        ]:
            if text is not None:
                (d / name).write_text(text)
        if case.stored.trajectory == "dir":
            (d / "trajectory.zarr").mkdir()
        elif case.stored.trajectory == "file":
            (d / "trajectory.zarr").write_bytes(case.random_bytes)
        if case.stored.checkpoint is not None:
            (d / "checkpoint").mkdir()
            (d / "checkpoint" / "meta.json").write_text(case.stored.checkpoint)
    (root / "ro").chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    return {
        "fresh": root / "new" / "out",
        "empty": root / "empty",
        "full": root / "full",
        "file": root / "file.txt",
        "bytes": root / "random.bin",
        "read-only": root / "ro" / "out",
        "under-file": root / "file.txt" / "out",
        "stored": stored,
        "default": Path("runs"),
    }


def argv_of(case: Case, paths: dict[str, Path]) -> list[str]:
    argv = [case.target.command] + ([case.target.name] if case.target.name else [])
    for token in case.tokens:
        values = [str(paths[v.kind]) if isinstance(v, PathRef) else v for v in token.values]
        if token.joined and len(values) == 1:
            argv.append(f"{token.flag}={values[0]}")
        else:
            argv += [token.flag, *values]
    return argv + list(case.extra)


def _outputs(case: Case, argv: list[str], cwd: Path) -> list[Path]:
    """Where this command may write: the last --out (and --resume) given, or the default runs/."""
    if case.target.command not in ("figure", "compare", "run", "sweep"):
        return []
    given = {}
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag in ("--out", "--resume"):
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            given[flag] = value
    paths = [cwd / "runs"]
    paths += [cwd / v for v in given.values() if v]
    if "" in given.values():
        paths.append(cwd)  # Path("") is the working directory
    return [p.resolve() for p in paths]


def snapshot(root: Path) -> dict[Path, tuple]:
    """Every path under ``root``: (size, mtime) of files, None for directories."""
    found: dict[Path, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            found[Path(dirpath, d)] = ()
        for f in filenames:
            st_ = os.lstat(Path(dirpath, f))
            found[Path(dirpath, f)] = (st_.st_size, st_.st_mtime_ns)
    return found


def changed_outside(before: dict, after: dict, outputs: list[Path]) -> list[Path]:
    """Paths created, removed or modified that are neither in an output directory nor one of
    its (newly created) parents."""
    changed = [p for p in before.keys() | after.keys() if before.get(p) != after.get(p)]
    return sorted(
        p for p in changed if not any(p == o or o in p.parents or p in o.parents for o in outputs)
    )


@dataclass
class Outcome:
    kind: str
    """'exit 0', 'compute reached', 'exit 2', 'exit 1 diverged', or a failure's kind."""
    failure: bool = False
    group: str = ""
    detail: str = ""


class CaseTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise CaseTimeout


def _where(frame: traceback.FrameSummary) -> str:
    path = Path(frame.filename)
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    return f"{shown}:{frame.lineno} in {frame.name}"


def _last_frame(err: BaseException) -> str:
    """The last frame of ``err``'s traceback, and the last one in the project's code if that is
    another (the traceback's last frame is often in a library)."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "?"
    own = [f for f in frames if Path(f.filename).is_relative_to(REPO) and ".venv" not in f.filename]
    where = _where(frames[-1])
    if own and own[-1] is not frames[-1]:
        where += f" (last project frame {_where(own[-1])})"
    return where


def _shape(line: str) -> str:
    """A stderr line without its field, values and type names (to group failures by kind)."""
    what = re.sub(r"^stagewise: error: \S+ = .*?: ", "", line)
    return re.sub(r"\{.*\}\S*|'[^']*'|\[[^\]]*\]|\S*\d\S*", "_", what)[:60]


def run_case(argv: list[str], capsys) -> Outcome:
    capsys.readouterr()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(CASE_SECONDS)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                rc = main(argv)
            except SystemExit as err:
                rc = 0 if err.code is None else err.code if isinstance(err.code, int) else 1
            except ComputeReached:
                rc = None
    except CaseTimeout:
        return Outcome("hang", True, f"hang > {CASE_SECONDS} s", "")
    except Exception as err:
        group = f"{type(err).__name__} at {_last_frame(err)}"
        return Outcome("traceback", True, group, f"{type(err).__name__}: {err}"[:300])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    lines += [
        f"{w.category.__name__}: {w.message} ({Path(w.filename).name}:{w.lineno})"
        for w in caught
        if not issubclass(w.category, QUIET_WARNINGS)
    ]
    if any("Traceback" in line for line in lines):
        return Outcome("traceback", True, "traceback printed", "\n".join(lines)[-300:])
    if rc is None or rc == 0:
        if lines:
            return Outcome("stderr on success", True, f"stderr on success: {_shape(lines[0])}")
        return Outcome("compute reached" if rc is None else "exit 0")
    if rc == 2:
        if len(lines) == 1 and lines[0].startswith("stagewise: error: "):
            return Outcome("exit 2")
        first = _shape(lines[0]) if lines else "<none>"
        return Outcome(
            "exit 2, not one line", True, f"exit 2 with {len(lines)} lines: {first}", err
        )
    if rc == 1 and lines and "diverged" in lines[-1]:
        return Outcome("exit 1 diverged")
    return Outcome(f"exit {rc}", True, f"exit {rc}: {_shape(lines[-1]) if lines else ''}", err)


@contextlib.contextmanager
def stubbed_compute():
    """Figures' compute, experiments' run and the sweep's runs replaced by ``_reached``."""
    stubs = tuple(dataclasses.replace(f, compute=_reached) for f in figures.registry.declared())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figures.registry, "declared", lambda: stubs)
        by_name = {(f.kind, f.command_name): f for f in stubs}
        mp.setattr(figures.registry, "find", lambda kind, name: by_name.get((kind, name)))
        for name, experiment in EXPERIMENTS.items():
            mp.setitem(EXPERIMENTS, name, dataclasses.replace(experiment, run=_reached))
        mp.setattr(simulate.sweep, "_run_sweep", _reached)
        yield


@pytest.fixture(scope="module")
def stubs():
    with stubbed_compute():
        yield


class Tally:
    """Outcomes of a fuzz run: the histogram, the targets hit, the failures by group."""

    def __init__(self):
        self.kinds: collections.Counter = collections.Counter()
        self.targets: collections.Counter = collections.Counter()
        self.failures: dict[str, list[tuple[list[str], str]]] = collections.defaultdict(list)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def add(self, case: Case, argv: list[str], outcome: Outcome) -> None:
        self.kinds[outcome.kind] += 1
        self.targets[case.target.label] += 1
        if outcome.failure:
            self.failures[outcome.group].append((argv, outcome.detail))

    def report(self) -> str:
        lines = [
            f"{self.total} cases: " + ", ".join(f"{k} {n}" for k, n in self.kinds.most_common())
        ]
        for group, found in sorted(self.failures.items(), key=lambda g: -len(g[1])):
            argv, detail = min(found, key=lambda f: len(" ".join(f[0])))
            lines.append(f"[{len(found)}x] {group}\n    stagewise {' '.join(argv)}\n    {detail}")
        return "\n".join(lines)


def fuzz(pools: list[list[Target]], examples: int, fixed: bool, tmp_path_factory, capsys) -> Tally:
    """``examples`` cases drawn from each pool of targets (one hypothesis run per pool), the
    same cases each time if ``fixed``."""
    tally = Tally()
    for pool in pools:
        _fuzz_pool(pool, examples, fixed, tally, tmp_path_factory, capsys)
    commands = ", ".join(sorted({t.command for pool in pools for t in pool}))
    with capsys.disabled():
        print(f"\ncli fuzz ({commands}): {tally.report()}")
    return tally


def _fuzz_pool(
    pool: list[Target], examples: int, fixed: bool, tally: Tally, tmp_path_factory, capsys
) -> None:
    @settings(
        max_examples=examples,
        derandomize=fixed,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(case=cases(pool))
    def one(case: Case) -> None:
        root = tmp_path_factory.mktemp("case")
        paths = _materialize(case, root)
        cwd = root / "cwd"
        cwd.mkdir()
        argv = argv_of(case, paths)
        before = snapshot(root)
        with contextlib.chdir(cwd):
            outcome = run_case(argv, capsys)
        outside = changed_outside(before, snapshot(root), _outputs(case, argv, cwd))
        if outside and not outcome.failure:
            rel = [str(p.relative_to(root)) for p in outside[:3]]
            outcome = Outcome("changed outside", True, "changed outside the output", str(rel))
        tally.add(case, argv, outcome)
        (root / "ro").chmod(0o755)

    one()


@pytest.fixture(scope="module")
def all_targets():
    return targets()


def test_fuzzed_options_are_the_parsers_options(all_targets, capsys):
    """Every option the fuzz draws is one the target's --help lists (the fuzz would otherwise
    test only unknown-option errors)."""
    assert {t.command for t in all_targets} == set(COMMANDS)
    for target in all_targets:
        with pytest.raises(SystemExit) as done:
            main([target.command, *([target.name] if target.name else []), "--help"])
        assert done.value.code == 0
        text = capsys.readouterr().out
        missing = [o.flag for o in target.options if o.flag not in text]
        assert not missing, f"{target.label}: {missing}"


FAST_EXAMPLES = {"derive": 8}
"""cases per command in the default suite (30 unless given): derive runs its symbolic algebra,
about a second a case."""


@pytest.mark.parametrize("command", COMMANDS)
def test_random_options_end_in_one_line_or_success(
    command, all_targets, stubs, tmp_path_factory, capsys
):
    pool = [t for t in all_targets if t.command == command]
    tally = fuzz([pool], FAST_EXAMPLES.get(command, 30), True, tmp_path_factory, capsys)
    assert not tally.failures, tally.report()


SLOW_EXAMPLES = 11
"""cases per target in the slow run (11 x 57 targets: over 600 cases)."""


@pytest.mark.slow
def test_random_options_of_every_target_end_in_one_line_or_success(
    all_targets, stubs, tmp_path_factory, capsys
):
    # one hypothesis run per target (drawn from one pool, some were never chosen); new cases
    # each time (a failure's argv, printed, reproduces it)
    tally = fuzz([[t] for t in all_targets], SLOW_EXAMPLES, False, tmp_path_factory, capsys)
    assert tally.total >= 500
    missed = {t.label for t in all_targets} - set(tally.targets)
    assert not missed, f"targets never drawn: {sorted(missed)}"
    assert not tally.failures, tally.report()


@pytest.mark.parametrize(
    "argv",
    [
        ["figure", "incremental-ode", "--quick"],
        ["compare", "incremental", "--quick"],
        ["run", "heads-gd", "--steps", "1000", "--chunk", "100"],
        ["sweep", "heads-gd", "--grid", "m=1.5,2.0"],
    ],
)
def test_a_valid_configuration_reaches_the_stubbed_compute(argv, stubs, tmp_path, capsys):
    """The stubs sit where the work starts: a valid command line gets there (and trains
    nothing)."""
    with contextlib.chdir(tmp_path):
        assert run_case(argv, capsys).kind == "compute reached"


def test_a_file_changed_beside_the_output_is_flagged(tmp_path):
    (tmp_path / "mine.txt").write_text("kept\n")
    before = snapshot(tmp_path)
    (tmp_path / "out" / "deep").mkdir(parents=True)
    (tmp_path / "out" / "deep" / "run.json").write_text("{}")
    assert changed_outside(before, snapshot(tmp_path), [tmp_path / "out"]) == []
    (tmp_path / "mine.txt").write_text("overwritten\n")
    changed = changed_outside(before, snapshot(tmp_path), [tmp_path / "out"])
    assert changed == [tmp_path / "mine.txt"]
