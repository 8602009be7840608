"""Security checks of a rendered deploy/k8s overlay, for check_k8s.py.

A daemon runs either with --insecure (plaintext: the base) or with all of --tls_cert, --tls_key and
--tls_ca read from one cert-manager certificate issued through an Issuer of the same render: a
Secret of a Certificate, or a csi.cert-manager.io volume (cert-manager's csi-driver, a certificate
per pod), with names that match what the peers dial and the worker names. Each pod mounts no key
but its own: a worker pod that is taken over must not hold another worker's (or ppcoord's) key,
which a Secret volume in a StatefulSet's one pod template would give every replica. Secure
overlays also give ppcoord --auth_tokens from a Secret, both daemons --data_root, workers
--checkpoint_root over their checkpoint volume, and NetworkPolicies that admit only the pipeline's
pods to gRPC and only the metrics ports to the rest.

Kubernetes' schemas do not cover cert-manager's kinds, so CERT_MANAGER holds the part of its v1
API (cert-manager.io/v1, 1.x) the overlays may use, strictly: an unknown or misspelled field fails.
CSI_ATTRIBUTES does the same for the csi-driver's volume attributes.
"""

import os

import jsonschema

TLS_FLAGS = ("tls_cert", "tls_key", "tls_ca")
TLS_KEYS = ("tls.crt", "tls.key", "ca.crt")
USAGES = ("server auth", "client auth")

CSI_DRIVER = "csi.cert-manager.io"
# The csi-driver's volume attributes (cert-manager csi-driver v0.x), without the driver prefix.
CSI_ATTRIBUTES = {
    "issuer-name", "issuer-kind", "issuer-group", "common-name", "dns-names", "ip-sans",
    "uri-sans", "duration", "is-ca", "key-usages", "key-encoding", "certificate-file", "ca-file",
    "privatekey-file", "fs-group", "renew-before", "reuse-private-key", "pkcs12-enable",
    "pkcs12-filename", "pkcs12-password", "literal-subject", "organizations",
    "organizationalunits",
}
# The file each of TLS_KEYS is written to unless an attribute renames it.
CSI_FILES = {"tls.crt": "certificate-file", "tls.key": "privatekey-file", "ca.crt": "ca-file"}

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


def issuers(objects):
    return {o["metadata"]["name"] for o in objects if o["kind"] == "Issuer"}


def certificates(objects):
    """{secretName: Certificate spec} of the Certificates that a rendered Issuer issues."""
    return {
        o["spec"]["secretName"]: o["spec"]
        for o in objects
        if o["kind"] == "Certificate"
        and o["spec"].get("issuerRef", {}).get("name") in issuers(objects)
    }


def csi_certificate(problems, where, attributes, pod_name, namespace, issuer_names):
    """The Certificate spec a csi.cert-manager.io volume asks for in pod `pod_name`, or None when
    no rendered Issuer would sign it."""
    attrs = {k.removeprefix(CSI_DRIVER + "/"): v for k, v in attributes.items()}
    for name in attrs.keys() - CSI_ATTRIBUTES:
        problems.add(where, f"csi volume attribute {CSI_DRIVER}/{name}: unknown to the csi-driver")
    kind = attrs.get("issuer-kind", "Issuer")
    if attrs.get("issuer-name") not in issuer_names or kind != "Issuer":
        return None

    def expand(text):
        return text.replace("${POD_NAME}", pod_name).replace("${POD_NAMESPACE}", namespace)

    return {
        "commonName": expand(attrs.get("common-name", "")),
        "dnsNames": [expand(d.strip()) for d in attrs.get("dns-names", "").split(",") if d.strip()],
        "usages": [u.strip() for u in attrs.get("key-usages", "").split(",")],
        "fsGroup": attrs.get("fs-group"),
    }


def mounted_files(problems, where, objects, workload, pod_name):
    """({file path in the container: (source, key)}, {source: Certificate spec or None}) of the
    secret, projected and csi.cert-manager.io volumes a pod (POD_NAME = pod_name) mounts."""
    spec, container = workload.pod, workload.container
    namespace = workload.obj["metadata"].get("namespace", "default")
    certs, issuer_names = certificates(objects), issuers(objects)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    files, sources = {}, {}
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        csi = volume.get("csi", {})
        if csi.get("driver") == CSI_DRIVER:
            attributes = csi.get("volumeAttributes", {})
            source = f"csi volume {mount['name']}"
            sources[source] = csi_certificate(
                problems, where, attributes, pod_name, namespace, issuer_names
            )
            for key, attribute in CSI_FILES.items():
                path = attributes.get(f"{CSI_DRIVER}/{attribute}", key)
                files[os.path.join(mount["mountPath"], path)] = (source, key)
        secrets = [volume["secret"]] if "secret" in volume else []
        projected = volume.get("projected", {}).get("sources", [])
        secrets += [s["secret"] for s in projected if "secret" in s]
        for secret in secrets:
            name = secret.get("secretName") or secret.get("name")
            source = f"Secret {name}"
            sources[source] = certs.get(name)
            # Without items, a Certificate's Secret holds TLS_KEYS; any other (pipeline-tokens),
            # which the render does not show, is taken to hold the token file.
            held = TLS_KEYS if name in certs else ("tokens",)
            for item in secret.get("items") or [{"key": k, "path": k} for k in held]:
                files[os.path.join(mount["mountPath"], item["path"])] = (source, item["key"])
    return files, sources


def check_tls_files(problems, where, mounted, flags, pod_name):
    """The --tls_* files of one pod (POD_NAME = pod_name) come from one issued certificate."""
    files, sources = mounted
    used = set()
    for flag, key in zip(TLS_FLAGS, TLS_KEYS):
        path = flags.get(flag, "").replace("$(POD_NAME)", pod_name)
        source, item = files.get(path, (None, None))
        if sources.get(source) is None or item != key:
            problems.add(where, f"--{flag}={path} is not {key} of a cert-manager certificate")
        used.add(source)
    if len(used) != 1:
        problems.add(where, f"--tls_* files of {pod_name} come from several sources {used}")
    return sources.get(next(iter(used)))


def check_own_key(problems, where, mounted, pod_name, identity):
    """Pod `pod_name` mounts no private key but its own, `identity`'s."""
    files, sources = mounted
    for path, (source, key) in sorted(files.items()):
        owner = (sources.get(source) or {}).get("commonName")
        if key == "tls.key" and owner != identity:
            problems.add(
                where,
                f"pod {pod_name} mounts the key of {owner or 'an unknown certificate'} "
                f"({source}, {path}): taken over, it would act as that identity",
            )


def check_key_readable(problems, where, workload, cert):
    """A csi-driver key is readable by the daemon's group only when fs-group is that group."""
    if cert is None or "fsGroup" not in cert:
        return
    group = workload.pod.get("securityContext", {}).get("runAsGroup")
    if cert["fsGroup"] != str(group):
        problems.add(where, f"csi fs-group {cert['fsGroup']} is not the pod's runAsGroup {group}")


def check_names(problems, where, cert, common_name, dialed):
    if cert is None:
        return
    if cert.get("commonName") != common_name:
        problems.add(where, f"certificate CN {cert.get('commonName')}, want {common_name}")
    if dialed not in cert.get("dnsNames", []):
        problems.add(where, f"certificate of {common_name} does not name {dialed} (peers dial it)")
    if not all(u in cert.get("usages", []) for u in USAGES):
        problems.add(where, f"certificate of {common_name} lacks usages {USAGES}")


def check_reloaded_file(problems, where, objects, workload, flag):
    """--FLAG (--deny_certs, --policy) names a file of a rendered ConfigMap mounted without subPath
    (a subPath mount never sees the ConfigMap change, so SIGHUP would reread the old file)."""
    path = workload.flags.get(flag, "")
    maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in workload.pod.get("volumes", [])}
    for mount in workload.container.get("volumeMounts", []):
        name = volumes.get(mount["name"], {}).get("configMap", {}).get("name")
        key = os.path.relpath(path, mount["mountPath"]) if path else ""
        if name in maps and "subPath" not in mount and key in maps[name].get("data", {}):
            return
    problems.add(where, f"{workload.where}: --{flag}={path} is not a file of a ConfigMap volume")


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
    coord_files = mounted_files(problems, overlay, objects, coord, "ppcoord")
    host = workers.flags.get("coordinator", "").rpartition(":")[0]
    cert = check_tls_files(problems, overlay, coord_files, coord.flags, "ppcoord")
    check_names(problems, overlay, cert, "ppcoord", host)
    check_own_key(problems, overlay, coord_files, "ppcoord", "ppcoord")
    if workers.flags.get("coordinator_identity", "ppcoord") != "ppcoord":
        problems.add(overlay, "--coordinator_identity is not the coordinator's certificate name")
    for i in range(workers.obj["spec"].get("replicas", 1)):
        pod = f"{workers.obj['metadata']['name']}-{i}"
        worker_files = mounted_files(problems, overlay, objects, workers, pod)
        cert = check_tls_files(problems, overlay, worker_files, workers.flags, pod)
        dialed = workers.flags.get("advertise_host", "").replace("$(POD_NAME)", pod)
        check_names(problems, overlay, cert, pod, dialed)
        check_own_key(problems, overlay, worker_files, pod, pod)
        check_key_readable(problems, overlay, workers, cert)
    for w in (coord, workers):
        check_reloaded_file(problems, overlay, objects, w, "deny_certs")
    check_reloaded_file(problems, overlay, objects, coord, "policy")
    if coord_files[0].get(coord.flags.get("auth_tokens"), (None, None))[1] != "tokens":
        problems.add(overlay, "ppcoord --auth_tokens is not key `tokens` of a Secret")
    for w, flags in ((coord, ("data_root",)), (workers, ("data_root", "checkpoint_root"))):
        for flag in flags:
            if not w.flags.get(flag):
                problems.add(overlay, f"{w.where}: --{flag} missing off loopback")
    mounts = {m["mountPath"] for m in workers.container.get("volumeMounts", [])}
    if not mounts & set(workers.flags.get("checkpoint_root", "").split(",")):
        problems.add(overlay, "workers' --checkpoint_root is not their checkpoint volume")
    check_policies(problems, overlay, objects, coord, workers)
