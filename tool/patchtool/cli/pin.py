"""``patchtool pin ...``: the pins in upstream-pins/, made, listed and removed by command."""

# No postponed annotations: typer reads every command's signature at each start (strings, it evaluates).

from typing import TYPE_CHECKING, Annotated

import typer

from patchtool.cli.completion import pin_names
from patchtool.cli.context import cache, load_project
from patchtool.cli.exits import Shown, command
from patchtool.cli.render import Style, printable

if TYPE_CHECKING:
    from patchtool.upstream import pinning

# Each command imports the pins' workflow when it runs: every command would load it at its start.

HELP = "The upstream pins in upstream-pins/: add one by version or git tag, list them, remove one."
WheelOption = Annotated[
    bool, typer.Option("--wheel", help="Pin the release's wheel (a pure one first, else this interpreter's).")
]
FilenameOption = Annotated[
    str | None, typer.Option(metavar="FILE", help="Pin this release file, as the index names it.")
]


@command(writes=True)
def pin_add(
    ctx: typer.Context,
    version: Annotated[str | None, typer.Argument(metavar="VERSION", help="The release to pin, e.g. 0.5.22.")] = None,
    git_url: Annotated[
        str | None,
        typer.Option(
            "--git", metavar="URL", help="Pin a git tag of this remote instead of a release file on the index."
        ),
    ] = None,
    tag: Annotated[str | None, typer.Option(metavar="TAG", help="The tag to pin (with --git).")] = None,
    sdist: Annotated[bool, typer.Option("--sdist", help="Pin the release's sdist.")] = False,
    wheel: WheelOption = False,
    filename: FilenameOption = None,
) -> Shown:
    """Write upstream-pins/UPSTREAM-VERSION.toml: the release file's name, sha256, size and prefix as the
    index lists them (like the active pin's; with --sdist, --wheel or --filename that file, its prefix
    mapped to the same repository paths), or with --git URL --tag T the tag's commit. Where upstream's
    history is in the cache (`rebase --history`), warns when the repository has no tag the pin's [git] names."""
    from patchtool.upstream import pinning
    from patchtool.upstream.history import unknown_tag
    from patchtool.upstream.releasefiles import FileChoice

    project = load_project(ctx)
    choice = FileChoice.of(sdist=sdist, wheel=wheel, filename=filename)
    pin = pinning.new_pin(project, cache(ctx), version, git_url=git_url, tag=tag, choice=choice)
    warning = unknown_tag(cache(ctx), pin)
    added = pinning.PinAdded(pin, tuple(pinning.write_pin(project.root, pin)), () if warning is None else (warning,))
    source = ""
    if pin.use == "artifact" and pin.artifact:
        source = f"{pin.artifact.filename}, sha256 {pin.artifact.sha256[:12]}"
    elif pin.git:
        source = f"{pin.git.tag} at {pin.git.commit}"
    return Shown(
        data=added,
        text=lambda style: "\n".join(
            [f"added pin {style.bold(pin.name)} ({source})", *(f"warning: {printable(w)}" for w in added.warnings)]
        ),
    )


@command()
def pin_list(ctx: typer.Context) -> Shown:
    """Every pin: which is active, which patches' applies_to admit it, whether the cache holds it."""
    from patchtool.upstream import pinning

    pins = pinning.list_pins(load_project(ctx), cache(ctx))
    return Shown(data=pinning.PinList(tuple(pins)), text=lambda style: _list_text(pins, style))


def _list_text(pins: list["pinning.PinInfo"], style: Style) -> str:
    if not pins:
        return "no pins in upstream-pins/"
    rows = []
    for p in pins:
        marks = [style.ok("active")] if p.active else []
        marks += [f"rebase {p.rebase}"] if p.rebase else []
        marks += ["cached" if p.cached else style.dim("not cached")]
        admitted = ", ".join(p.admitted_by) if p.admitted_by else style.bad("no patch admits it")
        rows.append(f"{style.bold(p.name)} ({p.version}, {p.source}; {', '.join(marks)})\n  admitted by: {admitted}")
    return "\n".join(rows)


@command(writes=True)
def pin_remove(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The pin, e.g. sglang-0.5.22.", autocompletion=pin_names)],
) -> Shown:
    """Remove a pin: refused for the active pin and for one a rebase in progress uses."""
    from patchtool.upstream import pinning

    removed = pinning.PinRemoved(name, tuple(pinning.remove_pin(load_project(ctx), name)))
    return Shown(data=removed, text=lambda style: f"removed pin {style.bold(name)}")
