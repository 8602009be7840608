"""Checks deploy/grafana and the parts of deploy/prometheus that promtool alone cannot.

- The dashboard JSON parses, has unique panel ids, every panel queries the provisioned datasource.
- Every metric the dashboard and the rules name is in docs/monitoring.md's metrics table, and every
  recorded series (name with a colon) they use is defined in recording-rules.yml.
- prometheus-kubernetes.yml passes `promtool check config` once its Kubernetes discovery (which
  Debian's Prometheus is built without) is swapped for a static target, and that discovery block
  uses only the fields and roles Prometheus documents.

Usage: check_monitoring.py --repo DIR
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile

import yaml

import deploylib

PROM = "deploy/prometheus"
DASHBOARD = "deploy/grafana/dashboards/pipeline.json"
DATASOURCES = "deploy/grafana/provisioning/datasources/pipeline.yaml"
PROVIDERS = "deploy/grafana/provisioning/dashboards/pipeline.yaml"
# https://prometheus.io/docs/prometheus/latest/configuration/configuration/#kubernetes_sd_config
KUBERNETES_SD_FIELDS = {
    "role",
    "api_server",
    "kubeconfig_file",
    "namespaces",
    "selectors",
    "attach_metadata",
    "basic_auth",
    "authorization",
    "oauth2",
    "proxy_url",
    "follow_redirects",
    "enable_http2",
    "tls_config",
}
KUBERNETES_SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


def load_yaml(repo, path):
    with open(os.path.join(repo, path), encoding="utf-8") as f:
        return yaml.safe_load(f)


def identifiers(expr):
    """Metric-name-shaped words of a PromQL expression, string literals and $variables removed."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\$\{?\w+\}?", "", expr)
    return set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))


def check_names(problems, where, expr, known, recorded):
    for word in identifiers(expr):
        if ":" in word and word not in recorded:
            problems.add(where, f"{word} is not recorded in {PROM}/recording-rules.yml")
        elif word.startswith("pp_") and word not in known:
            problems.add(where, f"{word} is not in the metrics table of {deploylib.METRICS_PAGE}")


def rules(repo):
    """[(file, rule)] of both rule files."""
    found = []
    for name in ("recording-rules.yml", "alert-rules.yml"):
        for group in load_yaml(repo, f"{PROM}/{name}")["groups"]:
            found += [(f"{PROM}/{name}", rule) for rule in group["rules"]]
    return found


def check_dashboard(problems, repo, known, recorded):
    with open(os.path.join(repo, DASHBOARD), encoding="utf-8") as f:
        dashboard = json.load(f)
    datasources = load_yaml(repo, DATASOURCES)["datasources"]
    uids = {d["uid"] for d in datasources if d.get("type") == "prometheus"}
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    source = variables.get("datasource", {})
    if source.get("type") != "datasource" or source.get("current", {}).get("value") not in uids:
        problems.add(
            DASHBOARD, f"variable 'datasource' must default to a provisioned uid {sorted(uids)}"
        )
    ids = [p.get("id") for p in dashboard["panels"]]
    if len(ids) != len(set(ids)):
        problems.add(DASHBOARD, f"panel ids are not unique: {ids}")
    for panel in dashboard["panels"]:
        where = f"{DASHBOARD} panel {panel.get('title')!r}"
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.add(where, "does not query the ${datasource} variable")
        if not panel.get("targets"):
            problems.add(where, "has no queries")
        for target in panel.get("targets", []):
            if not target.get("expr"):
                problems.add(where, f"query {target.get('refId')} has no expr")
            check_names(problems, where, target.get("expr", ""), known, recorded)
    for name, variable in variables.items():
        query = variable.get("query")
        if isinstance(query, dict):
            check_names(
                problems, f"{DASHBOARD} variable {name}", query.get("query", ""), known, recorded
            )
    providers = load_yaml(repo, PROVIDERS)
    if providers.get("apiVersion") != 1 or not all(
        p.get("type") == "file" and p.get("options", {}).get("path")
        for p in providers.get("providers", [])
    ):
        problems.add(PROVIDERS, "want apiVersion 1 and file providers with options.path")


def check_kubernetes_config(problems, repo):
    path = f"{PROM}/prometheus-kubernetes.yml"
    config = load_yaml(repo, path)
    local = load_yaml(repo, f"{PROM}/prometheus.yml")
    if config.get("rule_files") != local.get("rule_files"):
        problems.add(path, "loads other rule files than prometheus.yml")
    for job in config["scrape_configs"]:
        where = f"{path} {job['job_name']}"
        for sd in job.pop("kubernetes_sd_configs", []):
            if set(sd) - KUBERNETES_SD_FIELDS:
                problems.add(
                    where, f"unknown kubernetes_sd_configs fields {set(sd) - KUBERNETES_SD_FIELDS}"
                )
            if sd.get("role") not in KUBERNETES_SD_ROLES:
                problems.add(
                    where, f"role {sd.get('role')!r} is not one of {sorted(KUBERNETES_SD_ROLES)}"
                )
            if set(sd.get("namespaces", {})) - {"names", "own_namespace"}:
                problems.add(where, "unknown kubernetes_sd_configs namespaces fields")
            job.setdefault("static_configs", []).append({"targets": ["127.0.0.1:1"]})
    with tempfile.TemporaryDirectory() as tmp:
        for name in config.get("rule_files", []):
            shutil.copy(os.path.join(repo, PROM, name), tmp)
        with open(os.path.join(tmp, "prometheus.yml"), "w", encoding="utf-8") as f:
            yaml.safe_dump(config, f)
        out = subprocess.run(
            ["promtool", "check", "config", os.path.join(tmp, "prometheus.yml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            problems.add(
                path,
                "promtool check config (discovery swapped for a static target): "
                + (out.stdout + out.stderr).strip().replace(tmp + "/", ""),
            )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    a = parser.parse_args()
    problems = deploylib.Problems("check_monitoring")
    if shutil.which("promtool") is None:
        raise SystemExit(
            "check_monitoring: promtool not found: run scripts/setup.sh (Debian package prometheus)"
        )
    metrics = deploylib.documented_metrics(a.repo)
    if not metrics:
        raise SystemExit(f"check_monitoring: no metrics table found in {deploylib.METRICS_PAGE}")
    known = deploylib.series_names(metrics)
    all_rules = rules(a.repo)
    recorded = {rule["record"] for _, rule in all_rules if "record" in rule}
    for where, rule in all_rules:
        check_names(
            problems,
            f"{where} {rule.get('record') or rule.get('alert')}",
            rule["expr"],
            known,
            recorded,
        )
    check_dashboard(problems, a.repo, known, recorded)
    check_kubernetes_config(problems, a.repo)
    problems.finish(f"{len(all_rules)} rules, dashboard, {len(metrics)} documented metrics")


if __name__ == "__main__":
    main()
