"""Keeps deploy/docker and deploy/k8s honest without a container engine.

Every repository path the Dockerfiles name (COPY sources, scripts they run) must exist; every binary
they or the rendered manifests run must be built (build/bin/ means the build's bin dir); every flag
given to ppcoord, ppworker or ppctl must be in that binary's --helpfull; and bundle-libs.sh, which
makes the runtime images self-contained, must bundle every library the binaries load.
Exits 77 (skip) only when the binaries are not built yet; missing paths fail even then.

Usage: check_images.py --repo DIR --bin-dir DIR --venv DIR
"""

import argparse
import glob
import json
import os
import re
import shlex
import subprocess
import tempfile

import deploylib

DOCKERFILES = ("deploy/docker/Dockerfile.cpu", "deploy/docker/Dockerfile.cuda")
SHELL_OPERATORS = {"&&", "||", ";", "|"}
# Loaded from the runtime base image, never bundled (see bundle-libs.sh).
SYSTEM_LIB = re.compile(
    r"^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|"
    r"libstdc\+\+|libgcc_s|libcuda)\.so"
)


def instructions(path):
    """(line number, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    result, pending, start = [], "", 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if not pending:
                start = number
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            instruction, _, rest = (pending + stripped).partition(" ")
            result.append((start, instruction.upper(), rest.strip()))
            pending = ""
    return result


def words(rest):
    """Exec form (JSON array) or shell form -> list of words."""
    if rest.startswith("["):
        return json.loads(rest)
    return shlex.split(rest, comments=False)


def invocations(argv):
    """[(binary, [flags])] for each pp binary in a command line; flags up to the next operator."""
    found = []
    for i, word in enumerate(argv):
        if os.path.basename(word) not in deploylib.BINARIES:
            continue
        flags = []
        for later in argv[i + 1 :]:
            if later in SHELL_OPERATORS:
                break
            if deploylib.flag_name(later):
                flags.append(deploylib.flag_name(later))
        found.append((os.path.basename(word), flags))
    return found


def repo_path(word, top_level):
    """The repository-relative path a word names, or None (image paths, options, variables)."""
    if "/" not in word or word.startswith(("/", "-", "$")):
        return None
    return word if word.split("/")[0] in top_level else None


def scan_dockerfiles(problems, repo):
    """-> (repository paths named, [(where, binary, flags)])."""
    top_level = set(os.listdir(repo)) | {"build"}
    paths, runs = [], []
    for dockerfile in DOCKERFILES:
        for number, instruction, rest in instructions(os.path.join(repo, dockerfile)):
            where = f"{dockerfile}:{number}"
            if instruction in ("COPY", "ADD"):
                argv = words(rest)
                if not any(w.startswith("--from=") for w in argv):
                    paths += [
                        (where, source) for source in argv[:-1] if not source.startswith("--")
                    ]
            elif instruction in ("RUN", "CMD", "ENTRYPOINT"):
                argv = words(rest)
                paths += [(where, p) for p in (repo_path(w, top_level) for w in argv) if p]
                runs += [(where, binary, flags) for binary, flags in invocations(argv)]
    for where, path in paths:
        if not path.startswith("build/") and not glob.glob(os.path.join(repo, path)):
            problems.add(where, f"{path} does not exist in the repository")
    return paths, runs


def scan_manifests(problems, repo, venv):
    runs = []
    for overlay in deploylib.OVERLAYS:
        for name, spec, _ in deploylib.pod_templates(deploylib.render(repo, venv, overlay)):
            for c in spec["containers"]:
                argv = c.get("command", []) + c.get("args", [])
                where = f"{deploylib.OVERLAYS[overlay]} {name}/{c['name']}"
                found = invocations(argv)
                if not found:
                    problems.add(
                        where, f"runs {argv[:1]}, which is none of {', '.join(deploylib.BINARIES)}"
                    )
                runs += [(where, binary, flags) for binary, flags in found]
    return runs


def helpfull_flags(binary):
    # Abseil prints the flags and exits non-zero after --helpfull; only the listing matters.
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"^\s*--([A-Za-z0-9_]+)\b", out.stdout + out.stderr, re.M))


def check_bundle(problems, repo, bin_dir):
    """bundle-libs.sh on the real binaries: the bundle plus the base image's libraries runs them."""
    script = os.path.join(repo, "deploy/docker/bundle-libs.sh")
    with tempfile.TemporaryDirectory() as dest:
        binaries = [os.path.join(bin_dir, b) for b in deploylib.BINARIES]
        out = subprocess.run([script, dest] + binaries, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            problems.add("deploy/docker/bundle-libs.sh", f"failed: {out.stderr.strip()}")
            return
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(dest, "lib"))
        for b in deploylib.BINARIES:
            bundled = os.path.join(dest, "bin", b)
            ldd = subprocess.run(
                ["ldd", bundled], capture_output=True, text=True, env=env, timeout=60
            )
            for soname, path in re.findall(r"^\s*(\S+) => (\S+)", ldd.stdout, re.M):
                inside = path.startswith(dest + "/") or os.path.realpath(path).startswith(
                    "/usr/local/cuda"
                )
                if not inside and not SYSTEM_LIB.match(soname):
                    problems.add(
                        "deploy/docker/bundle-libs.sh",
                        f"{b} loads {soname} from {path}, not the bundle",
                    )
            run = subprocess.run(
                [bundled, "--helpfull"], capture_output=True, text=True, env=env, timeout=60
            )
            if run.returncode == 127 or "error while loading shared libraries" in run.stderr:
                problems.add("deploy/docker/bundle-libs.sh", f"bundled {b} does not start")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--venv", required=True)
    a = parser.parse_args()
    problems = deploylib.Problems("check_images")
    paths, runs = scan_dockerfiles(problems, a.repo)
    runs += scan_manifests(problems, a.repo, a.venv)

    named = set(deploylib.BINARIES) | {b for _, b, _ in runs}
    named |= {os.path.basename(p) for _, p in paths if p.startswith("build/bin/")}
    missing = sorted(b for b in named if not os.access(os.path.join(a.bin_dir, b), os.X_OK))
    if missing and not problems.items:
        print(
            f"check_images: SKIP: not built yet in {a.bin_dir}: {', '.join(missing)} "
            f"(repository paths checked: {len(paths)})"
        )
        raise SystemExit(deploylib.SKIP)
    if missing:
        problems.add(a.bin_dir, f"not built: {', '.join(missing)}")
        problems.finish("")

    flagged = {b for _, b, flags in runs if flags}
    known = {b: helpfull_flags(os.path.join(a.bin_dir, b)) for b in flagged}
    for b, flags in known.items():
        if not flags:
            problems.add(b, "--helpfull listed no flags")
    for where, binary, flags in runs:
        for flag in flags:
            if flag not in known[binary]:
                problems.add(where, f"{binary} has no flag --{flag} (not in {binary} --helpfull)")
    check_bundle(problems, a.repo, a.bin_dir)
    problems.finish(
        f"{len(paths)} paths, {len(runs)} command lines, bundle of {', '.join(deploylib.BINARIES)}"
    )


if __name__ == "__main__":
    main()
