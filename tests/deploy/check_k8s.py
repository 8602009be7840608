"""Renders deploy/k8s (base and every overlay) and checks it offline.

1. Kubernetes' own schemas (kubernetes-validate, strict: unknown fields fail) for the oldest version
   the manifests need (1.27: gRPC probes GA, PDB unhealthyPodEvictionPolicy) and the newest bundled.
2. What the pieces promise each other: workers reach the coordinator Service, probes and flags use
   the same ports, checkpoints live on one ReadWriteMany volume under the coordinator's --data_dir,
   a PodDisruptionBudget covers the workers, GPU limits only where --device is cuda.
3. Security (check_k8s_security.py): every daemon runs either --insecure or with TLS from
   cert-manager Secrets, tokens and folder limits; NetworkPolicies admit only the pipeline's pods.
4. Prometheus' Kubernetes discovery (deploy/prometheus/prometheus-kubernetes.yml) keeps these pods.

Usage: check_k8s.py --repo DIR --venv DIR
"""

import argparse
import os
import re
import subprocess
import tempfile

import yaml

import check_k8s_security as security
import deploylib

KUBERNETES_VERSIONS = ("1.27.0", "1.37.0")
MIN_WORKER_GRACE_SECONDS = 120


def validate_schemas(problems, venv, overlay, objects):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump_all(objects, f)
        f.flush()
        for version in KUBERNETES_VERSIONS:
            out = subprocess.run(
                [
                    os.path.join(venv, "bin", "kubernetes-validate"),
                    "--strict",
                    "--quiet",
                    "-k",
                    version,
                    f.name,
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            errors = [l for l in out.stdout.splitlines() + out.stderr.splitlines() if "ERROR" in l]
            for line in errors:
                problems.add(f"{overlay} (Kubernetes {version})", line.replace(f.name, "rendered"))
            if out.returncode != 0 and not errors:
                problems.add(f"{overlay} (Kubernetes {version})", out.stderr.strip() or "failed")


def args_of(container):
    """{flag: value} of a container's command line."""
    flags = {}
    for arg in container.get("command", []) + container.get("args", []):
        name = deploylib.flag_name(arg)
        if name:
            flags[name] = arg.partition("=")[2]
    return flags


def port_of(address):
    return int(address.rpartition(":")[2])


def named_ports(container):
    return {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def find(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def pvc_mounts(spec, container, claims):
    """{mountPath: PVC object} for the container's volumes backed by claims."""
    volumes = {
        v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
        for v in spec.get("volumes", [])
    }
    return {
        m["mountPath"]: claims.get(volumes.get(m["name"]))
        for m in container.get("volumeMounts", [])
        if volumes.get(m["name"])
    }


class Workload:
    """A Deployment or StatefulSet: its object, pod labels and annotations, and first container."""

    def __init__(self, obj):
        self.obj = obj
        self.where = f"{obj['kind']}/{obj['metadata']['name']}"
        self.pod = obj["spec"]["template"]["spec"]
        self.meta = obj["spec"]["template"]["metadata"]
        self.container = self.pod["containers"][0]
        self.flags = args_of(self.container)


def check_ports(problems, where, w):
    """Flags, container ports, gRPC health probes and Prometheus annotations agree."""
    ports = named_ports(w.container)
    for name in ("grpc", "metrics"):
        if name not in ports:
            problems.add(where, f"container port named {name!r} missing")
        elif name not in w.flags:
            problems.add(where, f"--{name} flag missing")
        elif port_of(w.flags[name]) != ports[name]:
            problems.add(where, f"--{name}={w.flags[name]} is not containerPort {ports[name]}")
    if "tls_cert" in w.flags:
        security.check_tls_probes(problems, where, w.container, ports)
    else:
        for probe in ("livenessProbe", "readinessProbe"):
            grpc = w.container.get(probe, {}).get("grpc")
            if not grpc:
                problems.add(where, f"{probe} is not a grpc.health.v1 (grpc:) probe")
            elif grpc.get("port") != ports.get("grpc"):
                problems.add(
                    where, f"{probe} checks port {grpc.get('port')}, not {ports.get('grpc')}"
                )
    annotations = w.meta.get("annotations", {})
    if annotations.get("prometheus.io/scrape") != "true":
        problems.add(where, 'pod annotation prometheus.io/scrape is not "true"')
    if str(ports.get("metrics")) != annotations.get("prometheus.io/port"):
        problems.add(
            where,
            f"annotation prometheus.io/port={annotations.get('prometheus.io/port')} "
            f"is not the metrics port {ports.get('metrics')}",
        )


def check_wiring(problems, where, objects, coord, workers):
    """Workers reach the coordinator Service, have stable names, and shut down gracefully."""
    services = find(objects, "Service")
    if coord.obj["spec"].get("replicas", 1) != 1:
        problems.add(where, "ppcoord must run as a single replica (one SQLite writer)")
    target = workers.flags.get("coordinator", "")
    host, _, port = target.rpartition(":")
    if not any(
        selects(s["spec"].get("selector"), coord.meta["labels"])
        and (host == s["metadata"]["name"] or host.startswith(s["metadata"]["name"] + "."))
        and any(str(p["port"]) == port and p.get("name") == "grpc" for p in s["spec"]["ports"])
        for s in services
    ):
        problems.add(
            where, f"--coordinator={target} is not the gRPC port of the coordinator's Service"
        )
    name = workers.obj["spec"].get("serviceName")
    if not any(
        s["metadata"]["name"] == name
        and s["spec"].get("clusterIP") == "None"
        and selects(s["spec"].get("selector"), workers.meta["labels"])
        for s in services
    ):
        problems.add(where, "the worker StatefulSet's serviceName is not a headless Service for it")
    if workers.pod.get("terminationGracePeriodSeconds", 30) < MIN_WORKER_GRACE_SECONDS:
        problems.add(
            where,
            f"worker terminationGracePeriodSeconds below {MIN_WORKER_GRACE_SECONDS} s: "
            "no time for the SIGTERM checkpoint",
        )
    if not any(
        selects(p["spec"].get("selector", {}).get("matchLabels"), workers.meta["labels"])
        for p in find(objects, "PodDisruptionBudget")
    ):
        problems.add(where, "no PodDisruptionBudget selects the workers")


def check_storage(problems, where, objects, coord, workers):
    """Store on the coordinator's volume; checkpoints on one RWX volume under --data_dir."""
    claims = {o["metadata"]["name"]: o for o in find(objects, "PersistentVolumeClaim")}
    data_dir = coord.flags.get("data_dir", "")
    ckpt = os.path.join(data_dir, "checkpoints")
    coord_mounts = pvc_mounts(coord.pod, coord.container, claims)
    if not data_dir or coord_mounts.get(data_dir) is None:
        problems.add(where, f"ppcoord --data_dir={data_dir} is not on a PersistentVolumeClaim")
    shared = coord_mounts.get(ckpt)
    if shared is None or "ReadWriteMany" not in shared["spec"].get("accessModes", []):
        problems.add(where, f"ppcoord's {ckpt} is not on a ReadWriteMany PersistentVolumeClaim")
    elif pvc_mounts(workers.pod, workers.container, claims).get(ckpt) is not shared:
        problems.add(where, f"workers do not mount claim {shared['metadata']['name']} at {ckpt}")


def check_devices(problems, where, overlay, objects, workers):
    """GPU limits exactly where --device is CUDA; the cpu overlay runs on CPUs."""
    device = workers.flags.get("device", "")
    gpus = workers.container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if device != "cpu" and not re.fullmatch(r"cuda:\d+", device):
        problems.add(where, f"ppworker --device={device} is neither cpu nor cuda:N")
    if device.startswith("cuda") and str(gpus) != "1":
        problems.add(where, f"--device={device} but nvidia.com/gpu limit is {gpus}, want 1")
    if device == "cpu" and "nvidia.com/gpu" in yaml.safe_dump_all(objects):
        problems.add(where, "--device=cpu but the manifests still mention nvidia.com/gpu")
    if (overlay == "cpu") != (device == "cpu"):
        problems.add(where, f"overlay {overlay} runs workers with --device={device}")


def check_image_tags(problems, where, repo, workloads):
    """Every image tag is built by the Dockerfile of that name."""
    for w in workloads:
        for c in w.pod["containers"]:
            tag = c["image"].rpartition(":")[2]
            if not os.path.exists(os.path.join(repo, "deploy", "docker", f"Dockerfile.{tag}")):
                problems.add(where, f"image {c['image']}: no deploy/docker/Dockerfile.{tag}")


def check_topology(problems, repo, overlay, objects):
    deployments, statefulsets = find(objects, "Deployment"), find(objects, "StatefulSet")
    if len(deployments) != 1 or len(statefulsets) != 1:
        problems.add(
            overlay,
            "want one coordinator Deployment and one worker StatefulSet, got "
            f"{len(deployments)} and {len(statefulsets)}",
        )
        return
    coord, workers = Workload(deployments[0]), Workload(statefulsets[0])
    for w in (coord, workers):
        check_ports(problems, f"{overlay} {w.where}", w)
    check_wiring(problems, overlay, objects, coord, workers)
    check_storage(problems, overlay, objects, coord, workers)
    check_devices(problems, overlay, overlay, objects, workers)
    check_image_tags(problems, overlay, repo, (coord, workers))
    security.check(problems, overlay, objects, coord, workers)


def sanitize(name):
    """Prometheus' form of a Kubernetes label or annotation name in __meta_* labels."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def check_discovery(problems, repo, overlay, objects):
    with open(
        os.path.join(repo, "deploy/prometheus/prometheus-kubernetes.yml"), encoding="utf-8"
    ) as f:
        config = yaml.safe_load(f)
    namespaces = {
        o["metadata"].get("namespace")
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
    }
    for job in config["scrape_configs"]:
        for sd in job.get("kubernetes_sd_configs", []):
            names = sd.get("namespaces", {}).get("names")
            if names is not None and not namespaces <= set(names):
                problems.add(
                    f"{overlay} discovery",
                    f"{job['job_name']} watches {names}, pods are in {namespaces}",
                )
        for name, spec, meta in deploylib.pod_templates(objects):
            labels = {sanitize(k): v for k, v in meta.get("labels", {}).items()}
            annotations = {sanitize(k): v for k, v in meta.get("annotations", {}).items()}
            ports = {p.get("name", "") for c in spec["containers"] for p in c.get("ports", [])}
            for rule in job.get("relabel_configs", []):
                sources = rule.get("source_labels", [])
                if len(sources) != 1:
                    continue
                source, regex = sources[0], f"(?:{rule.get('regex', '(.*)')})"
                if source.startswith("__meta_kubernetes_pod_label_"):
                    value = labels.get(source.removeprefix("__meta_kubernetes_pod_label_"))
                elif source.startswith("__meta_kubernetes_pod_annotation_"):
                    value = annotations.get(
                        source.removeprefix("__meta_kubernetes_pod_annotation_")
                    )
                elif source == "__meta_kubernetes_pod_container_port_name":
                    value = next((p for p in ports if re.fullmatch(regex, p)), "")
                else:
                    continue
                if rule.get("action", "replace") == "keep" and not re.fullmatch(regex, value or ""):
                    problems.add(
                        f"{overlay} discovery",
                        f"{job['job_name']} drops {name}: {source}="
                        f"{value!r} does not match {rule.get('regex')!r}",
                    )
                if rule.get("action", "replace") == "replace" and value is None:
                    problems.add(
                        f"{overlay} discovery", f"{job['job_name']}: {name} has no {source}"
                    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--venv", required=True)
    a = parser.parse_args()
    problems = deploylib.Problems("check_k8s")
    for overlay in deploylib.OVERLAYS:
        objects = deploylib.render(a.repo, a.venv, overlay)
        validate_schemas(problems, a.venv, overlay, objects)
        check_topology(problems, a.repo, overlay, objects)
        check_discovery(problems, a.repo, overlay, objects)
    problems.finish(
        f"{', '.join(deploylib.OVERLAYS)} against Kubernetes {', '.join(KUBERNETES_VERSIONS)}"
    )


if __name__ == "__main__":
    main()
