//! `deploy/` (Kubernetes manifests) and the Dockerfile, checked offline by
//! `tools/tests/deploy_check.py`: core kinds against kubernetes-validate's schemas, the
//! InferencePool and HTTPRoute against the vendored CRD schemas, the cross-references between
//! them, and ridge's side — the flags `ridge serve --help` lists (this build's binary), the
//! models `ridge pull --list` knows, the metric names written in the server's metrics.rs. No
//! cluster and no Docker daemon: nothing is applied and no image is built.
//!
//! The checker is proven on broken copies: each copy changes one thing the way a person editing
//! the manifests could, and the checker must refuse it with the line that names it.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// The files the checker reads, relative to the repository root.
const CHECKED: &[&str] = &[
    "Dockerfile",
    ".dockerignore",
    "crates/ridge-server/src/metrics.rs",
];

#[test]
fn the_manifests_and_the_dockerfile_pass_the_offline_checks() {
    let repo = repo();
    let ridge = env!("CARGO_BIN_EXE_ridge");
    let out = python_check(
        "deploy_check.py",
        &[
            OsStr::new("check"),
            OsStr::new("--repo"),
            repo.as_os_str(),
            OsStr::new("--ridge"),
            OsStr::new(ridge),
        ],
    );
    let s: serde_json::Value = serde_json::from_str(out.trim()).expect("the checker's summary");
    eprintln!("deploy_check: {s}");
    for (kind, n) in [
        ("Deployment", 2),
        ("Service", 2),
        ("InferencePool", 1),
        ("HTTPRoute", 1),
        ("HorizontalPodAutoscaler", 1),
        ("ConfigMap", 1),
        ("ServiceAccount", 1),
        ("Role", 1),
        ("RoleBinding", 1),
    ] {
        assert_eq!(s["kinds"][kind], n, "{kind} in {s}");
    }
    let resources = s["resources"].as_u64().unwrap();
    assert_eq!(s["validated"]["crd"], 2, "{s}");
    assert_eq!(
        s["validated"]["kubernetes-validate"].as_u64().unwrap(),
        resources - 2,
        "every other resource against the core schemas: {s}"
    );
    assert!(s["serve_flags"].as_u64().unwrap() > 20, "{s}");
    assert!(s["ridge_metrics"].as_u64().unwrap() > 10, "{s}");
}

/// One broken copy: in `file` (relative to the copied repository), `from` becomes `to`, and
/// the checker must fail saying `expect`.
struct Break {
    file: &'static str,
    from: &'static str,
    to: &'static str,
    expect: &'static str,
}

const BREAKS: &[Break] = &[
    Break {
        file: "deploy/ridge.yaml",
        from: "  selector:\n    app.kubernetes.io/name: ridge\n    app.kubernetes.io/component: model-server\n  ports:",
        to: "  selector:\n    app.kubernetes.io/name: rdge\n    app.kubernetes.io/component: model-server\n  ports:",
        expect: "Service ridge: selector {'app.kubernetes.io/name': 'rdge'",
    },
    Break {
        file: "deploy/inferencepool.yaml",
        from: "    - number: 8000",
        to: "    - number: 8080",
        expect: "InferencePool ridge: targetPort 8080 is not a container port",
    },
    Break {
        file: "deploy/inferencepool.yaml",
        from: "      app.kubernetes.io/component: model-server",
        to: "      app.kubernetes.io/component: server",
        expect: "InferencePool ridge: selector",
    },
    Break {
        file: "deploy/inferencepool.yaml",
        from: "      number: 9002",
        to: "      number: 9090",
        expect: "the picker's port targets `metrics`, not the EPP's --grpc-port 9002",
    },
    Break {
        file: "deploy/inferencepool.yaml",
        from: "    name: ridge-epp",
        to: "    name: ridge-picker",
        expect: "endpointPickerRef names no Service `ridge-picker`",
    },
    Break {
        file: "deploy/httproute.yaml",
        from: "          name: ridge",
        to: "          name: ridge-pool",
        expect: "`ridge-pool` names no InferencePool",
    },
    Break {
        file: "deploy/ridge.yaml",
        from: "            - --kv-cache-mem",
        to: "            - --kv-cache-size",
        expect: "`--kv-cache-size` is not a flag of `ridge serve`",
    },
    Break {
        file: "deploy/ridge.yaml",
        from: "            - --kv-events-endpoint\n            - tcp://*:5557",
        to: "            - --kv-events-endpoint\n            - tcp://*:5559",
        expect: "--kv-events-endpoint tcp://*:5559 is not on the container port `kv-events`",
    },
    Break {
        file: "deploy/ridge.yaml",
        from: "          readinessProbe:\n            httpGet:\n              path: /health",
        to: "          readinessProbe:\n            httpGet:\n              path: /healthz",
        expect: "readinessProbe probe path is `/healthz`",
    },
    Break {
        file: "deploy/ridge.yaml",
        from: "      terminationGracePeriodSeconds: 90",
        to: "      terminationGracePeriodSeconds: 30",
        expect: "terminationGracePeriodSeconds 30 is shorter than the preStop sleep (10 s) plus --drain-seconds (60 s)",
    },
    Break {
        file: "deploy/ridge.yaml",
        from: "args: [\"pull\", \"smollm2-135m\"]",
        to: "args: [\"pull\", \"gemma3-270m\"]",
        expect: "the init container pulls `gemma3-270m` but ridge serves --model `smollm2-135m`",
    },
    Break {
        file: "deploy/epp.yaml",
        from: "\"ridge:kv_cache_usage_perc\"",
        to: "\"ridge:gpu_cache_usage_perc\"",
        expect: "kvUsageSpec `ridge:gpu_cache_usage_perc` is not a metric ridge exports",
    },
    Break {
        file: "deploy/epp.yaml",
        from: "            - --pool-name\n            - ridge",
        to: "            - --pool-name\n            - ridge-pool",
        expect: "--pool-name `ridge-pool` is not the InferencePool `ridge`",
    },
    Break {
        file: "deploy/epp.yaml",
        from: "resources: [\"pods\"]",
        to: "resources: [\"services\"]",
        expect: "service account ridge-epp may not get pods",
    },
    Break {
        file: "deploy/hpa.yaml",
        from: "          name: ridge_num_requests_waiting",
        to: "          name: ridge_queue_length",
        expect: "Pods metric `ridge_queue_length` is served by no rule",
    },
    Break {
        file: "deploy/ridge.yaml",
        from: "              containerPort: 5558",
        to: "              containerPort: \"5558\"",
        expect: "Deployment ridge: Kubernetes 1.30 schema: spec.template.spec.containers.0.ports.2.containerPort",
    },
    Break {
        file: "deploy/inferencepool.yaml",
        from: "failureMode: FailOpen",
        to: "failureMode: FailSoft",
        expect: "spec.endpointPickerRef.failureMode: 'FailSoft' is not one of ['FailOpen', 'FailClose'] (schema inferencepool-v1.json)",
    },
    Break {
        file: "deploy/httproute.yaml",
        from: "      timeouts:",
        to: "      timeout:",
        expect: "('timeout' was unexpected) (schema httproute-v1.json)",
    },
    Break {
        file: "deploy/kustomization.yaml",
        from: "  - name: endpoint-picker",
        to: "  - name: epp",
        expect: "image `endpoint-picker` is not named in kustomization.yaml images",
    },
    Break {
        file: "Dockerfile",
        from: " python3 python3-pip",
        to: " python3",
        expect: "the runtime stage does not install python3-pip",
    },
    Break {
        file: "Dockerfile",
        from: "USER 10001:10001",
        to: "USER 10002:10002",
        expect: "pods run as uid 10001, the Dockerfile's USER is 10002",
    },
    Break {
        file: ".dockerignore",
        from: "target/",
        to: "targets/",
        expect: ".dockerignore: does not leave out target/",
    },
    // The metric names come from the server's source: renaming one there breaks the picker's
    // configuration that names it.
    Break {
        file: "crates/ridge-server/src/metrics.rs",
        from: "\"ridge:cache_config_info\"",
        to: "\"ridge:cache_info\"",
        expect: "cacheInfoSpec `ridge:cache_config_info` is not a metric ridge exports",
    },
];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

#[test]
fn the_checker_refuses_each_broken_copy_with_the_line_that_names_it() {
    let repo = repo();
    let ridge = env!("CARGO_BIN_EXE_ridge");
    let dirs: Vec<tempfile::TempDir> = BREAKS
        .iter()
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    // Every copy is checked at once (each check is a Python process of about half a second).
    let children: Vec<_> = BREAKS
        .iter()
        .zip(&dirs)
        .map(|(b, dir)| {
            let root = dir.path();
            copy_dir(&repo.join("deploy"), &root.join("deploy"));
            for f in CHECKED {
                std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
                std::fs::copy(repo.join(f), root.join(f)).unwrap();
            }
            let path = root.join(b.file);
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(
                text.matches(b.from).count(),
                1,
                "{}: `{}` must occur once to be broken",
                b.file,
                b.from
            );
            std::fs::write(&path, text.replacen(b.from, b.to, 1)).unwrap();
            Command::new(test_python())
                .arg(repo.join("tools/tests/deploy_check.py"))
                .args(["check", "--ridge", ridge, "--repo"])
                .arg(root)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run the test Python")
        })
        .collect();
    for (b, child) in BREAKS.iter().zip(children) {
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success(),
            "{}: `{}` → `{}` passed the checker",
            b.file,
            b.from,
            b.to
        );
        assert!(
            err.lines()
                .all(|l| l.starts_with("deploy_check: ") && !l.contains("Traceback")),
            "{}: the checker failed otherwise than with its own lines:\n{err}\n\
             (the Python test packages come with scripts/test)",
            b.file
        );
        assert!(
            err.contains(b.expect),
            "{}: `{}` → `{}`: expected `{}` in\n{err}",
            b.file,
            b.from,
            b.to,
            b.expect
        );
    }
}
