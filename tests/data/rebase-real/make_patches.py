"""Regenerate the patches of the real-upstream rebase test series from sglang 0.5.20.

Usage: python tests/data/rebase-real/make_patches.py [CACHE_DIR [OUT_DIR]]

CACHE_DIR is a patchtool cache holding tag v0.5.20 (default: .cache/test-upstream, where the
`upstream` test tier keeps it). Each patch is a small edit of real 0.5.20 code, committed on top
of the previous one in a scratch repository that borrows the cache's objects, and exported in
patchtool's canonical form. The same 0.5.20 import always gives byte-identical patches; see
README.md for what each one exercises. OUT_DIR defaults to patches/ beside this script.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
IDENT = {
    "GIT_AUTHOR_NAME": "Fork Serving",
    "GIT_AUTHOR_EMAIL": "serving@fork.example.org",
    "GIT_AUTHOR_DATE": "@1700000000 +0000",
    "GIT_COMMITTER_NAME": "Fork Serving",
    "GIT_COMMITTER_EMAIL": "serving@fork.example.org",
    "GIT_COMMITTER_DATE": "@1700000000 +0000",
}

# (file name, path, [(old, new)], subject, body): each `old` replaces its first occurrence, in order
PATCHES = [
    (
        "0001-scheduler-conservative-ratio-after-empty-retract.patch",
        "python/sglang/srt/managers/scheduler_components/new_token_ratio_tracker.py",
        [
            (
                "    def estimate_new_token_ratio_after_retract(reqs: Sequence[Req]) -> float:\n",
                "    def estimate_new_token_ratio_after_retract(reqs: Sequence[Req]) -> float:\n"
                "        if not reqs:\n"
                "            # nothing was retracted: keep the most conservative estimate\n"
                "            return 1.0\n",
            )
        ],
        "scheduler: keep a conservative new-token ratio after an empty retraction",
        "An empty retraction estimated a ratio of 0, so the next admission round\nover-admitted.",
    ),
    (
        "0002-disaggregation-assert-swa-prealloc-bound.patch",
        "python/sglang/srt/disaggregation/decode.py",
        [
            (
                "        full_len, swa_len = self._prealloc_kv_lens(req)\n",
                "        full_len, swa_len = self._prealloc_kv_lens(req)\n"
                "        assert swa_len <= full_len, (swa_len, full_len)\n",
            )
        ],
        "disaggregation: assert the SWA prealloc never exceeds the full one",
        "A decode instance that reserved more SWA than full KV slots leaked pages.",
    ),
    (
        "0003-scheduler-reset-ratio-on-flush.patch",
        "python/sglang/srt/managers/scheduler.py",
        [
            (
                "            self.cur_batch_for_debug = None\n            self.last_batch = None\n",
                "            self.cur_batch_for_debug = None\n            self.last_batch = None\n"
                "            self.new_token_ratio_tracker.reset()\n",
            )
        ],
        "scheduler: restart the new-token ratio when the cache is flushed",
        "After a flush the decayed ratio from the previous load no longer applies.",
    ),
    (
        "0004-marlin-no-compute-capability.patch",
        "python/sglang/srt/layers/quantization/marlin_utils.py",
        [
            (
                "        capability = major * 10 + minor\n",
                "        capability = None if major is None else major * 10 + minor\n",
            )
        ]
        * 2,
        "marlin: survive a device without a compute capability",
        "get_device_capability() gives (None, None) off CUDA; the product raised\nTypeError.",
    ),
    (
        "0005-remote-instance-hccl-on-npu.patch",
        "python/sglang/srt/connector/remote_instance.py",
        [
            (
                "from sglang.srt.utils import init_custom_process_group\n",
                "from sglang.srt.utils import init_custom_process_group\nfrom sglang.srt.utils.common import is_npu\n",
            ),
            ('        backend = "nccl"\n', '        backend = "nccl" if not is_npu() else "hccl"\n'),
        ],
        "remote instance connector: use hccl on Ascend NPUs",
        "Backport of the hunk sglang 0.5.21 carries: nccl does not exist on NPUs.",
    ),
]


def git(git_dir: Path, *args: str, input: bytes | None = None, index: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(IDENT, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    res = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=input, capture_output=True, env=env, check=False)
    if res.returncode:
        raise SystemExit(f"git {' '.join(args)} failed: {res.stderr.decode()}")
    return res.stdout.decode()


def main(cache: Path, out: Path = HERE / "patches") -> list[Path]:
    upstream = cache.absolute() / "upstream.git"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "git"
        git(scratch, "init", "-q", "--bare")
        (scratch / "objects" / "info" / "alternates").write_text(f"{upstream / 'objects'}\n")
        tags = git(
            upstream, "tag", "--list", "sglang-0.5.20-*"
        ).split()  # the import: <dist>-<version>-<sha12>-<mapping8>
        # a cache an older patchtool filled also holds its tag of the same import
        # (<dist>-<version>-<sha12>, no mapping): the same tree, imported once more
        trees = {git(upstream, "rev-parse", f"{t}^{{tree}}").strip() for t in tags}
        if len(trees) != 1:
            raise SystemExit(f"expected one import of sglang 0.5.20 in {upstream}, found {tags}")
        parent = git(upstream, "rev-parse", f"{max(tags, key=len)}^{{commit}}").strip()
        index = Path(tmp) / "index"
        git(scratch, "read-tree", parent, index=index)
        for name, path, edits, subject, body in PATCHES:
            text = git(scratch, "cat-file", "blob", f"{parent}:{path}")
            for old, new in edits:
                if old not in text:
                    raise SystemExit(f"{path} at 0.5.20 has no {old!r}")
                text = text.replace(old, new, 1)
            blob = git(scratch, "hash-object", "-w", "--stdin", input=text.encode()).strip()
            git(scratch, "update-index", "--cacheinfo", f"100644,{blob},{path}", index=index)
            tree = git(scratch, "write-tree", index=index).strip()
            parent = git(scratch, "commit-tree", tree, "-p", parent, input=f"{subject}\n\n{body}\n".encode()).strip()
            patch = git(
                scratch,
                "format-patch",
                "-1",
                parent,
                "--stdout",
                "--zero-commit",
                "--full-index",
                "--no-signature",
                "--no-stat",
            )
            (out / name).write_text(re.sub(r"^Date: .*\n", "", patch, count=1, flags=re.MULTILINE))
            written.append(out / name)
    return written


if __name__ == "__main__":
    for written in main(
        Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / ".cache" / "test-upstream", *(Path(a) for a in sys.argv[2:3])
    ):
        print(written)
