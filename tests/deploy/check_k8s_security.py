"""Security checks of a rendered deploy/k8s overlay, for check_k8s.py.

A daemon runs either with --insecure (plaintext: the base) or with all of --tls_cert, --tls_key and
--tls_ca read from Secrets that cert-manager Certificates of the same render issue (through an
Issuer of the render), with names that match what the peers dial and the worker names. Secure
overlays also give ppcoord --auth_tokens from a Secret, both daemons --data_root, workers
--checkpoint_root over their checkpoint volume, and NetworkPolicies that admit only the pipeline's
pods to gRPC and only the metrics ports to the rest.

Kubernetes' schemas do not cover cert-manager's kinds, so CERT_MANAGER holds the part of its v1
API (cert-manager.io/v1, 1.x) the overlays may use, strictly: an unknown or misspelled field fails.
"""

import os

import jsonschema

TLS_FLAGS = ("tls_cert", "tls_key", "tls_ca")
USAGES = ("server auth", "client auth")

_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"}
_NAMES = {"type": "array", "items": {"type": "string", "minLength": 1}}
_STRICT = {"type": "object", "additionalProperties": False}
_KEY_USAGES = (
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime",
    "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
)
_CERTIFICATE_SPEC = dict(
    _STRICT,
    required=["secretName", "issuerRef"],
    properties={
        "secretName": {"type": "string", "minLength": 1},
        "commonName": {"type": "string", "maxLength": 64},
        "dnsNames": _NAMES,
        "ipAddresses": _NAMES,
        "uris": _NAMES,
        "duration": _DURATION,
        "renewBefore": _DURATION,
        "isCA": {"type": "boolean"},
        "usages": {"type": "array", "items": {"enum": list(_KEY_USAGES)}},
        "privateKey": dict(_STRICT, properties={
            "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
            "size": {"type": "integer"},
            "encoding": {"enum": ["PKCS1", "PKCS8"]},
            "rotationPolicy": {"enum": ["Never", "Always"]},
        }),
        "issuerRef": dict(_STRICT, required=["name"], properties={
            "name": {"type": "string"},
            "kind": {"enum": ["Issuer", "ClusterIssuer"]},
            "group": {"type": "string"},
        }),
    },
)
_ISSUER_SPEC = dict(
    _STRICT,
    minProperties=1,
    maxProperties=1,
    properties={
        "selfSigned": dict(_STRICT, properties={"crlDistributionPoints": _NAMES}),
        "ca": dict(_STRICT, required=["secretName"], properties={
            "secretName": {"type": "string", "minLength": 1},
            "crlDistributionPoints": _NAMES,
            "ocspServers": _NAMES,
            "issuingCertificateURLs": _NAMES,
        }),
    },
)
_METADATA = {"type": "object", "required": ["name"]}
CERT_MANAGER = {
    kind: dict(
        _STRICT,
        required=["apiVersion", "kind", "metadata", "spec"],
        properties={
            "apiVersion": {"const": "cert-manager.io/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    )
    for kind, spec in (("Certificate", _CERTIFICATE_SPEC), ("Issuer", _ISSUER_SPEC))
}


def validate_cert_manager(problems, overlay, objects):
    """Every cert-manager object against CERT_MANAGER."""
    for obj in objects:
        if not obj.get("apiVersion", "").startswith("cert-manager.io/"):
            continue
        where = f"{overlay} {obj['kind']}/{obj.get('metadata', {}).get('name')}"
        schema = CERT_MANAGER.get(obj["kind"])
        if schema is None:
            problems.add(where, "not a cert-manager kind these checks know")
            continue
        for error in jsonschema.Draft202012Validator(schema).iter_errors(obj):
            path = ".".join(str(p) for p in error.absolute_path)
            problems.add(where, f"{path}: {error.message}")


def secret_files(spec, container):
    """{file path in the container: (secret name, key)} of its secret and projected volumes."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    files = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        sources = [{"secret": volume["secret"]}] if "secret" in volume else []
        sources += volume.get("projected", {}).get("sources", [])
        for source in sources:
            secret = source.get("secret")
            if not secret:
                continue
            name = secret.get("secretName") or secret.get("name")
            for item in secret.get("items") or [
                {"key": k, "path": k} for k in ("tls.crt", "tls.key", "ca.crt", "tokens")
            ]:
                files[os.path.join(mount["mountPath"], item["path"])] = (name, item["key"])
    return files


def certificates(objects):
    """{secretName: Certificate spec} of the Certificates that a rendered Issuer issues."""
    issuers = {o["metadata"]["name"] for o in objects if o["kind"] == "Issuer"}
    return {
        o["spec"]["secretName"]: o["spec"]
        for o in objects
        if o["kind"] == "Certificate" and o["spec"].get("issuerRef", {}).get("name") in issuers
    }


def check_tls_files(problems, where, files, flags, pod_name, certs):
    """The --tls_* files of one pod (POD_NAME = pod_name) come from one issued Certificate."""
    secrets = set()
    for flag, key in zip(TLS_FLAGS, ("tls.crt", "tls.key", "ca.crt")):
        path = flags.get(flag, "").replace("$(POD_NAME)", pod_name)
        secret, item = files.get(path, (None, None))
        if secret not in certs or item != key:
            problems.add(where, f"--{flag}={path} is not {key} of a cert-manager Certificate")
        secrets.add(secret)
    if len(secrets) != 1:
        problems.add(where, f"--tls_* files of {pod_name} come from several Secrets {secrets}")
    return certs.get(next(iter(secrets)))


def check_names(problems, where, cert, common_name, dialed):
    if cert is None:
        return
    if cert.get("commonName") != common_name:
        problems.add(where, f"certificate CN {cert.get('commonName')}, want {common_name}")
    if dialed not in cert.get("dnsNames", []):
        problems.add(where, f"certificate of {common_name} does not name {dialed} (peers dial it)")
    if not all(u in cert.get("usages", []) for u in USAGES):
        problems.add(where, f"certificate of {common_name} lacks usages {USAGES}")


def check_tls_probes(problems, where, container, ports):
    """Kubernetes' gRPC probes cannot do TLS: tcpSocket on gRPC, or HTTP on metrics."""
    wanted = {
        "tcpSocket": ("grpc", ports.get("grpc")),
        "httpGet": ("metrics", ports.get("metrics")),
    }
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        spec = container.get(probe, {})
        kind = next((k for k in wanted if k in spec), None)
        if kind is None:
            problems.add(where, f"{probe} under TLS: not tcpSocket (gRPC) or httpGet (metrics)")
        elif spec[kind].get("port") not in wanted[kind]:
            problems.add(where, f"{probe} {kind} checks port {spec[kind].get('port')}")


def check_policies(problems, where, objects, coord, workers):
    """Workers' and ppcoord's gRPC admit only pipeline pods; other peers reach only metrics."""
    for w, peers in ((workers, ("worker", "coordinator")), (coord, ("worker",))):
        policies = [
            p
            for p in objects
            if p["kind"] == "NetworkPolicy"
            and p["spec"]["podSelector"].get("matchLabels", {}).items() <= w.meta["labels"].items()
        ]
        if not policies or not all("Ingress" in p["spec"].get("policyTypes", []) for p in policies):
            problems.add(where, f"no ingress NetworkPolicy selects {w.where}")
            continue
        components = set()
        for rule in (r for p in policies for r in p["spec"].get("ingress", [])):
            ports = {p.get("port") for p in rule.get("ports", [])}
            for peer in rule.get("from", []):
                labels = peer.get("podSelector", {}).get("matchLabels", {})
                if "namespaceSelector" in peer or not labels:
                    if not ports or ports - {"metrics"}:
                        reached = ports or "every port"
                        problems.add(where, f"{w.where}: a non-pipeline peer reaches {reached}")
                elif labels.get("app.kubernetes.io/name") != "pipeline":
                    problems.add(where, f"{w.where}: pods {labels} reach it")
                else:
                    components.add(labels.get("app.kubernetes.io/component"))
        if not set(peers) <= components:
            problems.add(where, f"{w.where}: NetworkPolicy admits {components}, want {peers}")


def check(problems, overlay, objects, coord, workers):
    validate_cert_manager(problems, overlay, objects)
    insecure = ["insecure" in w.flags for w in (coord, workers)]
    tls = [all(f in w.flags for f in TLS_FLAGS) for w in (coord, workers)]
    for w, plain, secure in zip((coord, workers), insecure, tls):
        if plain == secure:
            problems.add(overlay, f"{w.where}: want either --insecure or all of --tls_*")
    if not all(tls):
        return
    certs = certificates(objects)
    coord_files = secret_files(coord.pod, coord.container)
    host = workers.flags.get("coordinator", "").rpartition(":")[0]
    cert = check_tls_files(problems, overlay, coord_files, coord.flags, "", certs)
    check_names(problems, overlay, cert, "ppcoord", host)
    if workers.flags.get("coordinator_identity", "ppcoord") != "ppcoord":
        problems.add(overlay, "--coordinator_identity is not the coordinator's certificate name")
    worker_files = secret_files(workers.pod, workers.container)
    for i in range(workers.obj["spec"].get("replicas", 1)):
        pod = f"{workers.obj['metadata']['name']}-{i}"
        cert = check_tls_files(problems, overlay, worker_files, workers.flags, pod, certs)
        dialed = workers.flags.get("advertise_host", "").replace("$(POD_NAME)", pod)
        check_names(problems, overlay, cert, pod, dialed)
    if coord_files.get(coord.flags.get("auth_tokens"), (None, None))[1] != "tokens":
        problems.add(overlay, "ppcoord --auth_tokens is not key `tokens` of a Secret")
    for w, flags in ((coord, ("data_root",)), (workers, ("data_root", "checkpoint_root"))):
        for flag in flags:
            if not w.flags.get(flag):
                problems.add(overlay, f"{w.where}: --{flag} missing off loopback")
    mounts = {m["mountPath"] for m in workers.container.get("volumeMounts", [])}
    if not mounts & set(workers.flags.get("checkpoint_root", "").split(",")):
        problems.add(overlay, "workers' --checkpoint_root is not their checkpoint volume")
    check_policies(problems, overlay, objects, coord, workers)
