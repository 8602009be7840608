"""Helpers shared by the deploy checks: rendering deploy/k8s, reading the metrics table of
docs/monitoring.md.

Every check prints one line per problem and exits 1 if it found any, 0 if none, 77 to skip.
"""

import os
import re
import subprocess
import sys


SKIP = 77
BINARIES = ("ppcoord", "ppworker", "ppctl")
OVERLAYS = {
    "base": "deploy/k8s/base",
    "cpu": "deploy/k8s/overlays/cpu",
    "secure": "deploy/k8s/overlays/secure",
}


class Problems:
    """Collects failures so one run reports all of them."""

    def __init__(self, check):
        self.check = check
        self.items = []

    def add(self, where, message):
        self.items.append(f"{where}: {message}")

    def finish(self, what):
        for item in self.items:
            print(f"{self.check}: FAIL {item}")
        if self.items:
            print(f"{self.check}: {len(self.items)} problems")
            sys.exit(1)
        print(f"{self.check}: ok ({what})")
        sys.exit(0)


def render(repo, venv, overlay):
    """kubectl kustomize of one of OVERLAYS -> list of objects (dicts)."""
    kubectl = os.path.join(venv, "bin", "kubectl")
    out = subprocess.run(
        [kubectl, "kustomize", os.path.join(repo, OVERLAYS[overlay])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise SystemExit(f"kustomize {OVERLAYS[overlay]} failed: {out.stderr.strip()}")
    import yaml  # here, so that a check run from a venv without PyYAML can use the rest

    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def pod_templates(objects):
    """(workload name, pod spec, pod template metadata) of every Deployment and StatefulSet."""
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet"):
            template = obj["spec"]["template"]
            yield obj["metadata"]["name"], template["spec"], template["metadata"]


METRICS_PAGE = os.path.join("docs", "monitoring.md")


def documented_metrics(repo):
    """{name: type} from the metrics table of METRICS_PAGE (rows like | `pp_x` | counter | ...)."""
    with open(os.path.join(repo, METRICS_PAGE), encoding="utf-8") as f:
        rows = re.findall(r"^\|\s*`(pp_[a-z0-9_]+)`\s*\|\s*(\w+)\s*\|", f.read(), re.M)
    return dict(rows)


def series_names(metrics):
    """Every series name a scrape of `metrics` can hold (histograms add _bucket, _sum, _count)."""
    names = set()
    for name, kind in metrics.items():
        names.add(name)
        if kind in ("histogram", "summary"):
            names.update(name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def flag_name(arg):
    """'--data_dir=/x' -> 'data_dir'; None for anything that is not a long flag."""
    m = re.match(r"--([A-Za-z0-9_]+)(=|$)", arg)
    return m.group(1) if m else None
