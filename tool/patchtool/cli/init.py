"""``patchtool init``: a new patch repository, here or in ``--root``, for a fork of any Python package."""

# No postponed annotations: typer reads every command's signature at each start (strings, it evaluates).

from typing import TYPE_CHECKING, Annotated

import typer

from patchtool.cli.context import cache, repository
from patchtool.cli.exits import Shown, command
from patchtool.cli.pin import FilenameOption, WheelOption
from patchtool.cli.render import Style, check_text
from patchtool.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from patchtool.series.initialise import Initialised


@command(creates=True)
def init(
    ctx: typer.Context,
    upstream: Annotated[
        str | None, typer.Option(metavar="NAME==VERSION", help="The release to fork, e.g. attrs==23.1.0.")
    ] = None,
    sdist: Annotated[bool, typer.Option("--sdist", help="Pin the release's sdist (the default).")] = False,
    wheel: WheelOption = False,
    filename: FilenameOption = None,
    git_url: Annotated[
        str | None,
        typer.Option("--git", metavar="URL", help="The upstream's git remote (with --tag): pinned by commit."),
    ] = None,
    tag: Annotated[str | None, typer.Option(metavar="TAG", help="The release tag (with --git).")] = None,
    prefix: Annotated[
        str | None,
        typer.Option(
            metavar="FROM:TO",
            help="Where the files live in the artifact "
            "(FROM, may hold {version}) and in the repository (TO); "
            "default: guessed from the artifact.",
        ),
    ] = None,
    index: Annotated[
        str | None,
        typer.Option(metavar="URL", help="The package index (PEP 691 / 503; default https://pypi.org/simple)."),
    ] = None,
) -> Shown:
    """Start a patch repository: patchset.toml with no patches, the first pin in upstream-pins/
    (the release file, its sha256 and size from the index, the prefix guessed from its layout and
    shown), a .gitignore for build/ dist/ work/ .patchtool/; `git init` where needed; then check."""
    from patchtool.series import initialise  # this command's alone: every command would load it at its start
    from patchtool.sglang import gpuresults

    if sdist and wheel:
        raise UsageError("--sdist and --wheel exclude each other")
    request = initialise.Request(
        upstream=upstream,
        kind="wheel" if wheel else "sdist" if sdist else None,
        filename=filename,
        git_url=git_url,
        tag=tag,
        prefix=prefix,
        index=index,
    )
    done = initialise.init(repository(ctx), cache(ctx), request, gpu_problems=gpuresults.check_problems)
    return Shown(
        data=done,
        text=lambda style: _text(done, style),
        code=ExitCode.OK if done.check.ok else ExitCode.PROBLEMS,
        problems=done.check.problems,
    )


def _text(done: "Initialised", style: Style) -> str:
    pin, art = done.pin, done.pin.artifact
    lines = [f"initialised {done.root}" + (" (git init)" if done.git_init else "")]
    if art is not None:
        lines.append(
            f"pin {style.bold(pin.name)}: {art.filename}, sha256 {art.sha256[:12]}"
            + (f", {art.size} bytes" if art.size else "")
        )
        how = "guessed from the artifact" if done.prefix_guessed else "as given"
        at = f"  (at {pin.version}: {art.prefix_from})" if str(art.prefix_from) != art.prefix_from_template else ""
        lines.append(f"prefix ({how}): {art.prefix_from_template or './'} -> {art.prefix_to or './'}{at}")
    if pin.git is not None:
        lines.append(f"git: {pin.git.url} {pin.git.tag} at {pin.git.commit}")
    lines += [f"wrote {', '.join(done.written)}", check_text(done.check, style)]
    return "\n".join(lines)
