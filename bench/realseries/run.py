"""Run patchtool on real downstream series, as their maintainer would, and keep the table.

The material is Debian's patch series of Python libraries and conda-forge feedstocks' recipe
patches (``packages.toml``), and the upstream sdists from PyPI. Nothing fetched is kept in the
repository: ``fetch`` puts Debian's packaging and each feedstock's ``recipe/`` under ``--debian
DIR`` and patchtool puts the sdists in ``--work DIR/cache``.

A feedstock's series is its ``recipe/meta.yaml``'s ``source: patches:`` list at the commit
``packages.toml`` names (conda-build applies them in that order, selectors aside); ``fetch``
writes it as a quilt series file, ``recipe/series``, beside the patches. The feedstock's
repository is read from ``--mirrors DIR`` (``DIR/<owner>+<name>/repo``, a bare git directory)
where it is there, else cloned from GitHub.

    python bench/realseries/run.py fetch --debian /tmp/realseries/debian [--mirrors DIR]
    python bench/realseries/run.py run --debian /tmp/realseries/debian --work /tmp/realseries/work
    python bench/realseries/run.py run ... --only werkzeug --table bench/realseries/TABLE.md

For each package ``run`` does, in a fresh directory: ``init`` at the series' release, ``import``
of the whole series (``--fuzz N`` where ``packages.toml`` gives ``fuzz``), ``export --quilt`` of
the unchanged series (compared with the original files byte for byte), ``scan`` across the
releases, ``rebase --dry-run`` to the newer release, ``rebase`` to it (every stop skipped, and
counted), then ``export --quilt`` of the moved series and its ``import`` into a fresh fork of the
newer release. A step's exit code 70, or a Python traceback, is a defect of patchtool; any other
refusal is listed with its first line so a reader can judge whose it is.

Each patch's verdict is kept from the rebase's ``--json`` output (``verdicts``): already upstream,
partly upstream, applied, or stopped (and skipped), with the stop's evidence. A second table sets
them against ``truth.toml``, the truth established by hand for every patch (``truth_table``):
how many patches upstream absorbed were recognised (dropped as upstream, or a stop that names
upstream evidence), how many were applied a second time, and how many patches upstream does not
have were dropped as upstream. The dry run's verdicts (``dry_verdicts``) are set against the
real rebase's (``agreement``): issue 31 wants them equal when every stop is skipped.

Standard library only; Python >= 3.11. ``--patchtool CMD`` names the patchtool to run (default:
``python -m patchtool`` with this checkout's ``tool/`` first on ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import filecmp
import glob
import json
import operator
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent


@dataclasses.dataclass(frozen=True)
class Package:
    debian: str | None  # Debian's source package, or None for a feedstock
    name: str
    from_version: str
    to_version: str
    scan: str
    repo: str | None = None  # upstream's repository under --mirrors DIR (DIR/<repo>/repo)
    tag: str | None = None  # its release tags, as a pin's [git] tag template
    feedstock: str | None = None  # a conda-forge feedstock, owner/name on GitHub
    commit: str | None = None  # the feedstock's commit whose recipe carries the series
    fuzz: int = 0  # the import --fuzz its patches need (a feedstock's, applied by GNU patch)

    @classmethod
    def from_dict(cls, d: dict) -> Package:
        if ("debian" in d) == ("feedstock" in d) or ("feedstock" in d) != ("commit" in d):
            raise ValueError(f"{d.get('name')}: a package names `debian`, or `feedstock` and `commit`")
        return cls(
            d.get("debian"),
            d["name"],
            d["from"],
            d["to"],
            d["scan"],
            d.get("repo"),
            d.get("tag"),
            d.get("feedstock"),
            d.get("commit"),
            d.get("fuzz", 0),
        )

    @property
    def source(self) -> str:
        """Where its series comes from: Debian's source package, or the feedstock at its commit."""
        return self.debian or f"{self.feedstock}@{(self.commit or '')[:10]}"

    @property
    def material(self) -> str:
        """Its directory under --debian DIR."""
        return self.debian or (self.feedstock or "").replace("/", "+")

    def series(self, material_dir: Path) -> Path:
        """Its quilt series file under --debian DIR."""
        if self.debian:
            return material_dir / self.material / "debian/patches/series"
        return material_dir / self.material / "recipe/series"


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    rc: int
    first_line: str  # the first line of the error (or of the output), for the table
    traceback: bool


def packages() -> list[Package]:
    with open(HERE / "packages.toml", "rb") as f:
        return [Package.from_dict(p) for p in tomllib.load(f)["package"]]


# --- fetching Debian's packaging -------------------------------------------------------------


def _deb_src_lines() -> list[str]:
    """deb-src lines for the machine's own Debian archive entries (deb822 or one-line form)."""
    lines: list[str] = []
    for path in glob.glob("/etc/apt/sources.list.d/*.sources"):
        for stanza in re.split(r"\n\s*\n", Path(path).read_text()):
            kv = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.MULTILINE))
            if "deb" not in kv.get("Types", "").split():
                continue
            key = kv.get("Signed-By", "").strip()
            opt = f"[signed-by={key}] " if key.startswith("/") else ""
            lines.extend(
                f"deb-src {opt}{uri} {suite} {kv.get('Components', 'main')}"
                for uri in kv.get("URIs", "").split()
                for suite in kv.get("Suites", "").split()
            )
    for path in ["/etc/apt/sources.list", *glob.glob("/etc/apt/sources.list.d/*.list")]:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        lines += ["deb-src" + line[3:] for line in text.splitlines() if line.startswith("deb ")]
    return list(dict.fromkeys(lines))


def fetch(debian_dir: Path, wanted: list[Package], mirrors: Path | None = None) -> int:
    """Each feedstock's ``recipe/`` (``fetch_feedstock``); ``apt-get source --download-only``
    each Debian package into ``debian_dir/<package>/``, unpacking only its ``debian/`` tarball.
    The system's apt configuration is not touched."""
    failed = 0
    for p in [p for p in wanted if p.feedstock]:
        try:
            names = fetch_feedstock(p, debian_dir, mirrors)
        except (subprocess.CalledProcessError, ValueError) as exc:
            print(f"{p.source}: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{p.source}: {len(names)} patches")
    wanted = [p for p in wanted if p.debian]
    if not wanted:
        return 1 if failed else 0
    lines = _deb_src_lines()
    if not lines:
        print("no Debian archive entry in /etc/apt to derive deb-src lines from", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as apt:
        aptdir = Path(apt)
        (aptdir / "lists/partial").mkdir(parents=True)
        (aptdir / "cache/archives/partial").mkdir(parents=True)
        (aptdir / "sources.list").write_text("\n".join(lines) + "\n")
        opts = [
            *("-o", f"Dir::Etc::SourceList={aptdir / 'sources.list'}"),
            *("-o", "Dir::Etc::SourceParts=/dev/null"),
            *("-o", f"Dir::State::Lists={aptdir / 'lists'}"),
            *("-o", f"Dir::Cache={aptdir / 'cache'}"),
            *("-o", "APT::Sandbox::User=root", "-qq"),
        ]
        subprocess.run(["apt-get", *opts, "update"], check=True)
        for p in wanted:
            out = debian_dir / p.material
            out.mkdir(parents=True, exist_ok=True)
            subprocess.run(["apt-get", *opts, "source", "--download-only", p.material], cwd=out, capture_output=True)
            tarballs = sorted(out.glob("*.debian.tar.*"))
            if not tarballs:
                print(f"{p.debian}: no debian tarball (a native package, or not in this release)", file=sys.stderr)
                failed += 1
                continue
            subprocess.run(["tar", "xf", tarballs[0].name], cwd=out, check=True)
            print(f"{p.debian}: {tarballs[0].name}, {len(_entries(p.series(debian_dir)))} patches")
    return 1 if failed else 0


def fetch_feedstock(p: Package, debian_dir: Path, mirrors: Path | None) -> list[str]:
    """The feedstock's ``recipe/`` at ``p.commit`` under ``debian_dir/<owner>+<name>/``, and its
    ``meta.yaml``'s patches written in order as the quilt series ``recipe/series``."""
    assert p.feedstock and p.commit
    out = debian_dir / p.material
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        gitdir = mirrors / p.material / "repo" if mirrors else None
        if gitdir is None or not gitdir.is_dir():
            gitdir = Path(tmp) / "feedstock.git"
            url = f"https://github.com/{p.feedstock}"
            subprocess.run(["git", "clone", "-q", "--bare", "--filter=blob:none", url, str(gitdir)], check=True)
        archive = subprocess.run(
            ["git", "--git-dir", str(gitdir), "archive", "--format=tar", p.commit, "recipe"],
            check=True,
            capture_output=True,
        ).stdout
    subprocess.run(["tar", "xf", "-"], input=archive, cwd=out, check=True)
    meta = (out / "recipe/meta.yaml").read_text()
    version = recipe_version(meta)
    if version != p.from_version:
        raise ValueError(f"recipe/meta.yaml at {p.commit[:10]} is version {version}, not {p.from_version}")
    lines, names = [], []
    for name, selector in recipe_patches(meta):
        if selected(selector):
            lines.append(f"{name}\n")
            names.append(name)
        else:  # kept in the series file as a comment, as the recipe keeps it
            lines.append(f"# {name}  # [{selector}]: not in the linux-64, Python 3.10 build\n")
    (out / "recipe/series").write_text("".join(lines))
    return names


def recipe_version(meta: str) -> str | None:
    """The version a conda recipe sets (``{% set version = "X" %}``, else ``version: X``)."""
    m = re.search(r"""\{%-?\s*set\s+version\s*=\s*["']([^"']+)["']""", meta) or re.search(
        r"^\s*version:\s*[\"']?([0-9][^\s\"']*)", meta, re.MULTILINE
    )
    return m.group(1) if m else None


# The build a feedstock's series is taken for: conda-build evaluates each line's selector
# (``# [win]``, ``# [py<=39 and python_impl=="cpython"]``) for one platform and Python.
SELECTOR_NAMES = {
    "linux": True,
    "linux64": True,
    "unix": True,
    "x86_64": True,
    "win": False,
    "win32": False,
    "win64": False,
    "osx": False,
    "arm64": False,
    "aarch64": False,
    "ppc64le": False,
    "py": 310,
    "py2k": False,
    "py3k": True,
    "python_impl": "cpython",
    "target_platform": "linux-64",
    "build_platform": "linux-64",
}


def recipe_patches(meta: str) -> list[tuple[str, str | None]]:
    """The ``patches:`` list of a conda recipe's ``meta.yaml``, in order: each item's path and its
    selector (``win or py>37`` for ``# [win or py>37]``, else None); comment lines left out."""
    m = re.search(r"^([ \t]*)patches:[ \t]*(?:#.*)?\n((?:\1[ \t]*(?:-[ \t].*|#.*)?\n)*)", meta, re.MULTILINE)
    if not m:
        return []
    items = re.findall(r"^[ \t]*-[ \t]+([^\s#]+)[ \t]*(?:#[ \t]*\[(.*)\])?", m.group(2), re.MULTILINE)
    return [(name, selector or None) for name, selector in items]


def selected(selector: str | None, names: dict[str, object] = SELECTOR_NAMES) -> bool:
    """Whether a recipe line with this selector is in the build ``names`` describes: the
    expression read with ``and``, ``or``, ``not``, comparisons, names and constants only."""
    if selector is None:
        return True
    ops = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le}
    ops |= {ast.Gt: operator.gt, ast.GtE: operator.ge}

    def value(node: ast.AST) -> object:
        if isinstance(node, ast.BoolOp):
            parts = [value(v) for v in node.values]
            return all(parts) if isinstance(node.op, ast.And) else any(parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not value(node.operand)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in ops:
            return ops[type(node.ops[0])](value(node.left), value(node.comparators[0]))
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.Constant):
            return node.value
        raise ValueError(f"a selector this script does not read: [{selector}]")

    return bool(value(ast.parse(selector, mode="eval").body))


def _entries(series: Path) -> list[str]:
    """A quilt series file's patch lines (no comments, no blank lines)."""
    if not series.exists():
        return []
    return [ln for ln in series.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


# --- running patchtool -------------------------------------------------------------------------


class Runner:
    def __init__(self, patchtool: list[str], work: Path) -> None:
        self.patchtool = patchtool
        self.env = {
            **os.environ,
            "PATCHTOOL_CACHE_DIR": str(work / "cache"),
            "GIT_AUTHOR_NAME": "Corpus Run",
            "GIT_AUTHOR_EMAIL": "corpus@example.invalid",
            "GIT_COMMITTER_NAME": "Corpus Run",
            "GIT_COMMITTER_EMAIL": "corpus@example.invalid",
            "COLUMNS": "120",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT / "tool"), os.environ.get("PYTHONPATH")])),
        }
        self.log = work / "log.txt"

    def __call__(self, name: str, cwd: Path, *args: str) -> tuple[Step, str]:
        cmd = [*self.patchtool, *args]
        r = subprocess.run(cmd, cwd=cwd, env=self.env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        with self.log.open("a") as log:
            log.write(f"\n$ (cd {cwd} && {shlex.join(cmd)})  # rc={r.returncode}\n{r.stdout}{r.stderr}")
        text = r.stderr + r.stdout if r.returncode else r.stdout
        errors = _json(r.stdout).get("errors") or []
        if errors:
            text = f"error: {errors[0].get('message', '')}\n{text}"
        first = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("error")), "")
        if not first:
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        tb = r.returncode == 70 or "Traceback (most recent call last)" in r.stderr + r.stdout
        return Step(name, r.returncode, first[:160], tb), r.stdout


def _json(out: str) -> dict:
    try:
        return json.loads(out)
    except ValueError:
        return {}


def run_one(p: Package, debian_dir: Path, work: Path, pt: Runner, mirrors: Path | None = None) -> dict:
    base = work / p.name
    shutil.rmtree(base, ignore_errors=True)
    fork = base / "fork"
    fork.mkdir(parents=True)
    series = p.series(debian_dir)
    steps: list[Step] = []
    result: dict = {"package": p.name, "source": p.source, "from": p.from_version, "to": p.to_version}
    series_names = [ln.split()[0] for ln in _entries(series)]
    result["patches"] = len(series_names)
    result["verdicts"] = verdicts([], series_names)  # until a rebase reports them

    def step(name: str, cwd: Path, *args: str) -> tuple[Step, str]:
        s, out = pt(name, cwd, *args)
        steps.append(s)
        return s, out

    s, _ = step("init", fork, "init", "--upstream", f"{p.name}=={p.from_version}", "--sdist")
    if s.rc == 0:
        fuzz = ("--fuzz", str(p.fuzz)) if p.fuzz else ()
        s, _ = step("import", fork, "import", *fuzz, "--series", str(series))
    if s.rc == 0:
        quilt = base / "quilt-from"
        s, _ = step("export --quilt (unchanged)", fork, "export", "--quilt", str(quilt))
        if s.rc == 0:
            result["export_identical"] = _compare_quilt(series, quilt / "patches")
        s, out = step("scan", fork, "--json", "scan", "--versions", p.scan)
        result["scan"] = _scan_summary(_json(out))
        stops: list[str] = []
        envelopes: list[dict] = []
        history: tuple[str, ...] = ()
        if mirrors is not None and p.repo and p.tag:
            # the user names upstream's repository (a local mirror, allowed beneath DIR only)
            (pin,) = (fork / "upstream-pins").glob("*.toml")
            url = mirrors / p.repo / "repo"
            pin.write_text(pin.read_text() + f'\n[git]\nurl = "{url}"\ntag = "{p.tag}"\n')
            history = ("--allow-local-urls-in", str(mirrors), "--history")
        result["history"] = bool(history)
        # what the rebase would do, asked first with the same flags: its verdicts, set against
        # the real rebase's below (``agreement``)
        _, out = step(
            "rebase --dry-run", fork, "--json", *history[:2], "rebase", "--to", p.to_version, "--dry-run", *history[2:]
        )
        result["dry_run"] = dry_verdicts(_json(out), series_names)
        s, out = step("rebase", fork, "--json", *history[:2], "rebase", "--to", p.to_version, *history[2:])
        for _ in range(result["patches"] + 1):
            envelopes.append(_json(out))
            data = envelopes[-1].get("data") or {}
            if s.rc != 3 and data.get("status") != "conflict":
                break
            stopped = _stopped(data.get("patches") or [])
            stops.append(str(stopped.get("id", "?")) if stopped else "?")
            why = "corpus run: every stop is skipped"
            s, out = step("rebase --skip", fork, "--json", *history[:2], "rebase", "--skip", "--reason", why)
        result["rebase_stops"] = stops
        result["verdicts"] = verdicts(envelopes, series_names, empty=_written_empty(fork, envelopes))
        result["agreement"] = agreement(result["dry_run"], verdicts(envelopes, series_names))
        if s.rc == 0:
            quilt = base / "quilt-to"
            s, _ = step("export --quilt (moved)", fork, "export", "--quilt", str(quilt))
            # a series whose every patch upstream took (or the run skipped) has nothing to import
            if s.rc == 0 and _entries(quilt / "patches" / "series"):
                again = base / "again"
                again.mkdir()
                s, _ = step("init (newer)", again, "init", "--upstream", f"{p.name}=={p.to_version}", "--sdist")
                if s.rc == 0:
                    step("import back", again, "import", "--series", str(quilt / "patches" / "series"))
    result["steps"] = [dataclasses.asdict(x) for x in steps]
    return result


def _compare_quilt(series: Path, exported: Path) -> dict:
    """Which exported files are byte for byte the original's: the series file and each patch."""
    original = series.parent
    names = ["series", *(ln.split()[0] for ln in _entries(series))]
    same = [n for n in names if (exported / n).is_file() and filecmp.cmp(original / n, exported / n, shallow=False)]
    return {"files": len(names), "identical": len(same), "differ": [n for n in names if n not in same]}


def _scan_summary(envelope: dict) -> dict:
    data = envelope.get("data") or {}
    return {"rc": envelope.get("exit_code"), "versions": len(data.get("versions") or [])}


# --- each patch's verdict, from the rebase's --json output ------------------------------------

_STOP_OUTCOMES = ("conflict", "target gone")
_APPLIED_OUTCOMES = ("applied unchanged", "applied with shifted context", "merged by 3-way merge")

# The verdicts the second table counts, in its column order.
UPSTREAM = "already upstream"
PARTLY = "partly upstream"
APPLIED = "applied"
STOP_EVIDENCE = "stop naming upstream"
STOP = "stop, no upstream evidence"
EMPTY = "kept, empty"
DROPPED = "dropped"
MISSING = "no verdict"
VERDICTS = (UPSTREAM, PARTLY, STOP_EVIDENCE, STOP, APPLIED, EMPTY, DROPPED, MISSING)


def _stopped(patches: list[dict]) -> dict | None:
    """The patch a rebase's report stopped at (its patches are in series order)."""
    return next((p for p in patches if p.get("outcome") in _STOP_OUTCOMES), None)


def _written_empty(fork: Path, envelopes: list[dict]) -> frozenset[str]:
    """The patch files a finished rebase wrote with no hunk: kept in the series, changing nothing."""
    data = (envelopes[-1].get("data") or {}) if envelopes else {}
    if data.get("status") != "done":
        return frozenset()
    files = [str(p.get("file", "")) for p in data.get("patches") or [] if p.get("commit")]
    return frozenset(f for f in files if (fork / f).is_file() and not _has_hunk((fork / f).read_bytes()))


def _has_hunk(text: bytes) -> bool:
    return any(line.startswith((b"@@ ", b"GIT binary patch")) for line in text.splitlines())


def verdicts(envelopes: list[dict], names: list[str], *, empty: frozenset[str] = frozenset()) -> list[dict]:
    """Each patch's verdict, in series order and named by the series' file name, from the
    ``--json`` envelopes of one rebase: ``rebase --to``, then each ``rebase --skip``. The last
    report gives every patch's final outcome; a patch that stopped (and was then skipped, so its
    final outcome is ``dropped``) keeps the stop's outcome, detail and evidence. A patch applied
    (or partly upstream) whose file is in ``empty`` was written without a hunk: it changes
    nothing, so it was not applied a second time, nor recognised. The patches of the report are
    matched to the series by position (import keeps the order); a report of another length gives
    no verdict."""
    final: list[dict] = []
    stops: dict[int, dict] = {}
    for envelope in envelopes:
        patches = (envelope.get("data") or {}).get("patches") or []
        if not patches:
            continue
        final = patches
        for i, patch in enumerate(patches):
            if patch.get("outcome") in _STOP_OUTCOMES:
                stops.setdefault(i, patch)
    if len(final) != len(names):
        why = f"the rebase reported {len(final)} patches for a series of {len(names)}"
        return [{"name": n, "verdict": MISSING, "outcome": "", "detail": why, "evidence": []} for n in names]
    out = []
    for i, (name, patch) in enumerate(zip(names, final, strict=True)):
        stop = stops.get(i)
        seen = stop or patch
        evidence = _evidence(seen)
        outcome = str(patch.get("outcome", ""))
        if stop is not None:
            verdict = _verdict(str(stop.get("outcome", "")), evidence)
            outcome = f"{stop.get('outcome')}, then {outcome}"
        elif patch.get("file") in empty and outcome != UPSTREAM:
            verdict = EMPTY
            outcome = f"{outcome}, written empty"
        else:
            verdict = _verdict(outcome, evidence)
        out.append(
            {
                "name": name,
                "id": patch.get("id", ""),
                "verdict": verdict,
                "outcome": outcome,
                "said": str(seen.get("outcome", "")),  # patchtool's own outcome: the stop's, for a stop
                "detail": str(seen.get("detail", "")),
                "evidence": evidence,
            }
        )
    return out


def _evidence(patch: dict) -> list[str]:
    return [*patch.get("evidence", []), *(f"upstream has: {u}" for u in patch.get("upstream_has", []))]


def _verdict(outcome: str, evidence: list[str]) -> str:
    """The table's verdict for one patchtool outcome (a stop's, for a patch that stopped)."""
    if outcome in _STOP_OUTCOMES:
        return STOP_EVIDENCE if evidence else STOP
    if outcome in (UPSTREAM, PARTLY, DROPPED):
        return outcome
    if outcome in _APPLIED_OUTCOMES:
        return APPLIED
    return MISSING  # not reached: the rebase ended before it


def dry_verdicts(envelope: dict, names: list[str]) -> list[dict]:
    """Each patch's verdict from the ``--json`` envelope of ``rebase --to X --dry-run``, in series
    order, as ``verdicts`` gives the real rebase's: the dry run goes on past a conflict as if it
    were skipped, so each patch has one outcome, and a later one on the same files names the
    stops it assumes skipped (``assumes``)."""
    patches = (envelope.get("data") or {}).get("patches") or []
    if len(patches) != len(names):
        why = f"the dry run reported {len(patches)} patches for a series of {len(names)}"
        return [{"name": n, "verdict": MISSING, "outcome": "", "detail": why, "evidence": []} for n in names]
    out = []
    for name, patch in zip(names, patches, strict=True):
        outcome = str(patch.get("outcome", ""))
        evidence = _evidence(patch)
        out.append(
            {
                "name": name,
                "id": patch.get("id", ""),
                "verdict": _verdict(outcome, evidence),
                "outcome": outcome,
                "said": outcome,
                "detail": str(patch.get("detail", "")),
                "evidence": evidence,
                "assumes": list(patch.get("assumes", [])),
            }
        )
    return out


def agreement(dry: list[dict], real: list[dict]) -> list[dict]:
    """Each patch's dry-run verdict against the real rebase's with every stop skipped (both from
    ``verdicts``/``dry_verdicts``, in series order): they agree when the table's verdict and
    patchtool's own outcome (a stop's, for a patch that stopped) are the same. A dry-run verdict
    that assumes an earlier stop skipped is what the real rebase gives once that stop was
    skipped, so it agrees when the real one matches. ``agree`` is None where either has no
    verdict for the patch."""
    rows = []
    for d, r in zip(dry, real, strict=True):
        compared = MISSING not in (d["verdict"], r["verdict"])
        rows.append(
            {
                "name": r["name"],
                "agree": (d["verdict"], d.get("said")) == (r["verdict"], r.get("said")) if compared else None,
                "dry_run": f"{d['verdict']} ({d.get('said') or d['detail']})",
                "rebase": f"{r['verdict']} ({r.get('said') or r['detail']})",
                "assumes": list(d.get("assumes", [])),
            }
        )
    return rows


# Exit codes that are a step's normal outcome on real material: a scan that predicts conflicts
# (5), a rebase that stops at one (3). Any other nonzero exit is a refusal the table lists.
_EXPECTED = {"scan": {0, 5}, "rebase --dry-run": {0, 5}, "rebase": {0, 3}, "rebase --skip": {0, 3}}


def _agreed(rows: list[dict]) -> str:
    """``A/N``: of the N patches both the dry run and the rebase gave a verdict for, A agree."""
    compared = [r["agree"] for r in rows if r["agree"] is not None]
    return f"{sum(compared)}/{len(compared)}" if compared else "-"


def table(results: list[dict]) -> str:
    head = (
        "| package | from -> to | patches | steps refused by patchtool | tracebacks "
        "| export unchanged: identical files | rebase stops (skipped) | dry run = rebase, stops skipped |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for r in results:
        steps = [Step(**s) for s in r["steps"]]
        bad = [s for s in steps if s.rc not in _EXPECTED.get(s.name, {0}) or s.traceback]
        refused = [f"{s.name}: exit {s.rc}, {s.first_line}" for s in bad]
        ex = r.get("export_identical")
        exported = f"{ex['identical']}/{ex['files']}" if ex else "-"
        rows.append(
            f"| {r['package']} | {r['from']} -> {r['to']} | {r['patches']} | {'; '.join(refused) or 'none'} "
            f"| {sum(s.traceback for s in steps)} | {exported} | {len(r.get('rebase_stops', []))} "
            f"| {_agreed(r.get('agreement') or [])} |"
        )
    every = [a for r in results for a in r.get("agreement") or []]
    out = [f"The dry run's verdict equals the real rebase's (every stop skipped) for {_agreed(every)} patches."]
    out += [
        f"- {r['package']} `{a['name']}`: dry run {a['dry_run']}"
        + (f", assumes {', '.join(a['assumes'])} skipped" if a["assumes"] else "")
        + f"; rebase {a['rebase']}"
        for r in results
        for a in r.get("agreement") or []
        if a["agree"] is False
    ]
    return head + "\n".join(rows) + "\n\n" + "\n".join(out) + "\n"


# --- the truth x patchtool's verdict --------------------------------------------------------------

TRUTHS = ("fully", "partly", "other-form", "not", "n/a", "unsure")
ABSORBED = ("fully", "partly", "other-form")  # upstream has the change, or fixed the problem otherwise

# What a verdict on a patch counts as, by its truth (``judge``).
RECOGNISED = "recognised"
TWICE = "applied a second time"
UNRECOGNISED = "stopped without upstream evidence"
WRONG_DROP = "wrongly dropped as upstream"
WRONG_HUNKS = "hunks wrongly called upstream"
KEPT_EMPTY = "kept as an empty patch"
COUNTS = (RECOGNISED, TWICE, UNRECOGNISED, KEPT_EMPTY, WRONG_DROP, WRONG_HUNKS)


def load_truth(path: Path) -> dict[tuple[str, str], str]:
    """``truth.toml``: (package, series file name) -> truth."""
    with open(path, "rb") as f:
        entries = tomllib.load(f)["patch"]
    return {(e["package"], e["name"]): e["truth"] for e in entries}


def judge(truth: str, verdict: str) -> str | None:
    """What patchtool's verdict on a patch of this truth counts as, or None when it counts as
    nothing (a patch upstream lacks that applied or stopped; a missing verdict; an unsure truth).
    A patch upstream absorbed is recognised when dropped as upstream or stopped naming upstream
    evidence (for one upstream took only partly, also "partly upstream"); applied, or partly
    applied, it is applied a second time. Dropping as upstream a patch upstream has only partly,
    or not at all, loses what upstream lacks; "partly upstream" on a patch upstream lacks drops
    some of its hunks. A patch kept without a hunk was neither recognised nor applied."""
    if verdict == EMPTY:
        return KEPT_EMPTY
    if truth in ABSORBED:
        if verdict == UPSTREAM:
            return WRONG_DROP if truth == "partly" else RECOGNISED
        if verdict == STOP_EVIDENCE or (verdict == PARTLY and truth == "partly"):
            return RECOGNISED
        if verdict in (APPLIED, PARTLY):
            return TWICE
        if verdict == STOP:
            return UNRECOGNISED
    elif truth in ("not", "n/a"):
        if verdict == UPSTREAM:
            return WRONG_DROP
        if verdict == PARTLY:
            return WRONG_HUNKS
    return None


def _verdict_rows(results: list[dict], truth: dict[tuple[str, str], str]) -> list[tuple[str, str, str, dict]]:
    """(package, name, truth, verdict record) for every patch of every package run."""
    return [
        (r["package"], v["name"], truth.get((r["package"], v["name"]), "unsure"), v)
        for r in results
        for v in r.get("verdicts") or []
    ]


def truth_table(results: list[dict], truth: dict[tuple[str, str], str]) -> str:
    """The second table: the truth (rows) x patchtool's verdict (columns), the counts per package,
    and each patch whose verdict counts against patchtool."""
    rows = _verdict_rows(results, truth)
    out = ["| truth \\ verdict | " + " | ".join(VERDICTS) + " | patches |", "|---" * (len(VERDICTS) + 2) + "|"]
    for t in TRUTHS:
        mine = [v["verdict"] for _, _, tt, v in rows if tt == t]
        if mine:
            out.append(f"| {t} | " + " | ".join(str(mine.count(x)) for x in VERDICTS) + f" | {len(mine)} |")
    out += [
        "",
        "| package | patches | absorbed | " + " | ".join(COUNTS) + " |",
        "|---" * (len(COUNTS) + 3) + "|",
    ]
    packages = [r["package"] for r in results]
    for package in [*packages, None]:
        mine = [(t, v["verdict"]) for p, _, t, v in rows if package is None or p == package]
        judged = [judge(t, verdict) for t, verdict in mine]
        absorbed = sum(t in ABSORBED for t, _ in mine)
        out.append(
            f"| {package or 'all'} | {len(mine)} | {absorbed} | "
            + " | ".join(str(judged.count(c)) for c in COUNTS)
            + " |"
        )
    against = [
        f"- {p} `{n}`: truth {t}, {judge(t, v['verdict'])}: {v['outcome']}"
        + (f"; {v['detail']}" if v["detail"] else "")
        + (f"; evidence: {'; '.join(v['evidence'])}" if v["evidence"] else "")
        for p, n, t, v in rows
        if judge(t, v["verdict"]) not in (None, RECOGNISED)
    ]
    if against:
        out += ["", "Verdicts that count against patchtool:", *against]
    missing = sorted({p for p, n, t, v in rows if v["verdict"] == MISSING})
    if missing:
        out += ["", f"No verdict (the rebase did not run or finish) for some patches of: {', '.join(missing)}"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["fetch", "run", "table"])
    ap.add_argument(
        "--debian", type=Path, required=True, help="where Debian's packaging and the feedstocks' recipes are (or go)"
    )
    ap.add_argument("--work", type=Path, help="scratch directory for the forks and the sdist cache (run)")
    ap.add_argument("--only", action="append", help="a package's PyPI name (repeatable)")
    ap.add_argument("--patchtool", default=f"{shlex.quote(sys.executable)} -m patchtool")
    ap.add_argument("--table", type=Path, help="also write the tables (Markdown) to this file")
    ap.add_argument(
        "--mirrors",
        type=Path,
        help="local mirrors (DIR/<owner>+<name>/repo): upstream's, for rebase --history; feedstocks', for fetch",
    )
    ap.add_argument(
        "--truth", type=Path, default=HERE / "truth.toml", help="the truth per patch (default: %(default)s)"
    )
    a = ap.parse_args(argv)
    wanted = [p for p in packages() if not a.only or p.name in a.only]
    if a.what == "fetch":
        return fetch(a.debian.resolve(), wanted, a.mirrors.resolve() if a.mirrors else None)
    if a.work is None:
        ap.error(f"{a.what} needs --work DIR")
    work = a.work.resolve()
    if a.what == "table":  # again from a finished run's results.json
        results = json.loads((work / "results.json").read_text())
        text = table(results) + "\n" + truth_table(results, load_truth(a.truth))
        print(text)
        if a.table:
            a.table.write_text(text)
        return 0
    work.mkdir(parents=True, exist_ok=True)
    pt = Runner(shlex.split(a.patchtool), work)
    results = []
    for p in wanted:
        print(f"{p.name} {p.from_version} -> {p.to_version} ...", flush=True)
        results.append(run_one(p, a.debian.resolve(), work, pt, a.mirrors.resolve() if a.mirrors else None))
        (work / "results.json").write_text(json.dumps(results, indent=1))
    text = table(results) + "\n" + truth_table(results, load_truth(a.truth))
    print(text)
    if a.table:
        a.table.write_text(text)
    return 1 if any(Step(**s).traceback for r in results for s in r["steps"]) else 0


if __name__ == "__main__":
    sys.exit(main())
