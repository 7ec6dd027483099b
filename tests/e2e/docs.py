#!/usr/bin/env python3
"""The documentation cannot rot unseen. In README.md and docs/*.md:

- every shell block (```sh) says whether this test runs it: the comment line before it is
  `<!-- doc-test: run -->` (run as a bash script, `set -euo pipefail`, in a directory where
  `build/` is the build under test and the source tree's folders are at hand; exit 0 expected;
  `<!-- doc-test: run needs python -->` when it uses the Python module, and is skipped, saying so,
  in a build without it), or
  `<!-- doc-test: skip REASON -->` (printed, so that what is not run is seen, with why);
- every relative link names a file that exists, and an anchor (#...) a heading there;
- docs/configuration.md names every SKT_* variable the library knows (libselfckpt/src/config.cpp)
  and every option of `skt-run --help`.

  docs.py --source DIR --build DIR [--case NAME]"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

import harness

DIRECTIVE = re.compile(r"^<!-- doc-test: (run|skip)(?: (.*))? -->$")


def documents(source):
    names = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(source, "docs"))
                                   if f.endswith(".md"))
    return {name: open(os.path.join(source, name)).read() for name in names}


def shell_blocks(text):
    """(first line number, directive, reason, code) of every ```sh block."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            before = lines[start - 1].strip() if start > 0 else ""
            m = DIRECTIVE.match(before)
            out.append((start + 1, m.group(1) if m else None, (m.group(2) or "") if m else "",
                        "\n".join(lines[start + 1:j])))
            i = j
        i += 1
    return out


def anchor(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def links(source, docs, checks):
    for name, text in docs.items():
        here = os.path.dirname(os.path.join(source, name))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, mailto:
            path, _, fragment = target.partition("#")
            full = os.path.normpath(os.path.join(here, path)) if path else os.path.join(source, name)
            ok = os.path.exists(full)
            if ok and fragment and full.endswith(".md"):
                headings = {anchor(h) for h in re.findall(r"^#+ (.*)$", open(full).read(), re.M)}
                ok = fragment in headings
            checks.expect(ok, f"{name}: the link {target} leads somewhere")


def configuration(source, build, checks):
    page = open(os.path.join(source, "docs", "configuration.md")).read()
    known = re.findall(r'\{"\w+", "(SKT_\w+)"', open(os.path.join(source, "libselfckpt", "src", "config.cpp")).read())
    missing = [v for v in known if f"`{v}`" not in page]
    checks.expect(known and not missing, f"docs/configuration.md names every SKT_* setting ({len(known)})",
                  " ".join(missing))
    helped = subprocess.run([os.path.join(build, "daemon", "skt-run"), "--help"], capture_output=True, text=True).stdout
    options = sorted(set(re.findall(r"^\s+(--[a-z][a-z-]*)", helped, re.M)) - {"--help"})
    missing = [o for o in options if f"`{o}" not in page]
    checks.expect(options and not missing, f"docs/configuration.md names every skt-run option ({len(options)})",
                  " ".join(missing))


def commands(source, build, docs, checks):
    with tempfile.TemporaryDirectory() as work:
        # The source tree's folders, and the build under test as build/.
        for entry in os.listdir(source):
            if entry.startswith(".") or entry.startswith("build"):
                continue
            os.symlink(os.path.join(source, entry), os.path.join(work, entry))
        os.symlink(build, os.path.join(work, "build"))
        # As a user's shell would have it: nothing that makes mpirun oversubscribe unasked.
        env = harness.daemon_env(SKT_TOOLS_BUILD_DIR=build)
        for name, text in docs.items():
            for line, directive, reason, code in shell_blocks(text):
                where = f"{name}:{line}"
                if directive is None:
                    checks.expect(False, f"{where}: the shell block says whether the doc test runs it "
                                         "(<!-- doc-test: run --> or <!-- doc-test: skip REASON -->)", code)
                elif directive == "skip":
                    checks.expect(bool(reason), f"{where}: not run: {reason or '(no reason given)'}")
                elif reason == "needs python" and not glob.glob(os.path.join(build, "libselfckpt", "python",
                                                                               "selfckpt*.so")):
                    checks.expect(True, f"{where}: not run: this build has no Python module (-Dpython)")
                else:
                    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + code], cwd=work, env=env,
                                          capture_output=True, text=True, timeout=900)
                    checks.expect(done.returncode == 0, f"{where}: runs as written (exit {done.returncode})",
                                  (done.stdout + done.stderr)[-3000:])


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--case", choices=["links", "configuration", "commands"], action="append")
    o = parser.parse_args(argv)
    source, build = os.path.abspath(o.source), os.path.abspath(o.build)
    docs = documents(source)
    checks = harness.Checks()
    for case in o.case or ["links", "configuration", "commands"]:
        print(f"-- {case}", flush=True)
        if case == "links":
            links(source, docs, checks)
        elif case == "configuration":
            configuration(source, build, checks)
        else:
            commands(source, build, docs, checks)
    return harness.report_failures(checks.failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
