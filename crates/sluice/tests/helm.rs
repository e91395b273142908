//! The Helm chart (`packaging/helm/sluice`): `helm lint` and `helm template` with Helm built
//! from its Go module (test.sh, into target/tools/helm), each render checked against the
//! Kubernetes API's types (`packaging/helm/check`), what the chart promises checked in the
//! manifests, the ConfigMap's sluice.yaml validated by `sluice validate`, and the renders that
//! must fail failing with their message.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tool(name: &str) -> PathBuf {
    let p = root().join("target/tools/helm").join(name);
    assert!(
        p.exists(),
        "{} is missing: ./test.sh builds Helm and the manifest checker into target/tools/helm",
        p.display()
    );
    p
}

fn chart() -> PathBuf {
    root().join("packaging/helm/sluice")
}

/// `helm template` with `args`: Ok(the manifests), or Err(what Helm said).
fn template(args: &[&str]) -> Result<String, String> {
    let out = Command::new(tool("helm"))
        .args(["template", "edge"])
        .arg(chart())
        .args(args)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The manifests, checked against the API's types; as the API server would read them.
fn checked(manifests: &str) -> Vec<Value> {
    use std::io::Write;
    let mut child = Command::new(tool("check"))
        .arg("-json")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifests.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the manifests do not decode as the Kubernetes API's types: {}\n{manifests}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind)
}

/// The ConfigMap's sluice.yaml, validated by the binary the image would run.
fn validate_config(objects: &[Value]) -> String {
    let cm = find(objects, "ConfigMap").expect("a ConfigMap");
    let text = cm["data"]["sluice.yaml"].as_str().unwrap().to_owned();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("helm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sluice.yaml");
    std::fs::write(&file, &text).unwrap();
    let out = Command::new(BIN)
        .args(["validate", "--config-only", "-c"])
        .arg(&file)
        .env("SLUICE_ADMIN_KEY", "0123456789abcdef0123")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the chart's sluice.yaml is refused: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn the_chart_lints() {
    let out = Command::new(tool("helm"))
        .arg("lint")
        .arg(chart())
        .arg("--strict")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    // --strict turns warnings into failures; an icon is only recommended (INFO).
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("0 chart(s) failed"), "{said}");
}

#[test]
fn file_mode_renders_a_deployment_with_probes_drain_and_budget() {
    let objects = checked(&template(&[]).unwrap());
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    for k in ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"] {
        assert!(kinds.contains(&k), "no {k}: {kinds:?}");
    }
    assert!(
        !kinds.contains(&"HorizontalPodAutoscaler"),
        "autoscaling is off by default"
    );
    let d = find(&objects, "Deployment").unwrap();
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "status");
    assert_eq!(c["lifecycle"]["preStop"]["sleep"]["seconds"], 5);
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        c["args"],
        serde_json::json!(["run", "-c", "/etc/sluice/sluice.yaml"])
    );
    assert_eq!(c["image"], "localhost/sluice:0.1.0");
    let ports: Vec<&Value> = c["ports"].as_array().unwrap().iter().collect();
    assert!(ports.iter().any(|p| p["containerPort"] == 9080));
    assert!(
        !ports.iter().any(|p| p["containerPort"] == 9180),
        "no admin port in file mode"
    );
    let pdb = find(&objects, "PodDisruptionBudget").unwrap();
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        d["spec"]["selector"]["matchLabels"]
    );
    let text = validate_config(&objects);
    assert!(
        text.contains("enabled: false"),
        "the admin API is off in file mode: {text}"
    );
}

#[test]
fn file_mode_carries_the_values_routes_and_settings() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("helm-v-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let values = dir.join("values.yaml");
    std::fs::write(
        &values,
        r#"
settings:
  workers: 2
  timeouts: {drain: 20s}
config:
  upstreams:
    - id: users
      nodes: {"users.default.svc:8080": 1}
  routes:
    - id: users-api
      uri: /api/users/*
      upstream_id: users
      plugins:
        limit-count: {count: 100, time_window: 60}
"#,
    )
    .unwrap();
    let objects = checked(&template(&["-f", values.to_str().unwrap()]).unwrap());
    let text = validate_config(&objects);
    for s in [
        "users-api",
        "limit-count",
        "drain: 20s",
        "workers: 2",
        "0.0.0.0:9080",
    ] {
        assert!(text.contains(s), "no {s:?} in the ConfigMap: {text}");
    }
}

#[test]
fn etcd_mode_watches_etcd_and_takes_the_admin_key_from_a_secret() {
    let objects = checked(
        &template(&[
            "--set",
            "mode=etcd",
            "--set",
            "etcd.endpoints={http://etcd-0.etcd:2379,http://etcd-1.etcd:2379}",
            "--set",
            "etcd.adminKeySecret.name=sluice-admin",
            "--set",
            "autoscaling.enabled=true",
        ])
        .unwrap(),
    );
    let text = validate_config(&objects);
    assert!(text.contains("http://etcd-1.etcd:2379"), "{text}");
    assert!(text.contains("${{SLUICE_ADMIN_KEY}}"), "{text}");
    assert!(
        !text.contains("routes"),
        "resources are etcd's, not the file's: {text}"
    );
    let d = find(&objects, "Deployment").unwrap();
    assert!(
        d["spec"].get("replicas").is_none(),
        "the autoscaler owns the replicas"
    );
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let env = &c["env"][0];
    assert_eq!(env["name"], "SLUICE_ADMIN_KEY");
    assert_eq!(env["valueFrom"]["secretKeyRef"]["name"], "sluice-admin");
    assert!(
        d["spec"]["template"]["metadata"]["annotations"]["checksum/config"].is_string(),
        "a change of node settings rolls the pods"
    );
    let hpa = find(&objects, "HorizontalPodAutoscaler").unwrap();
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], d["metadata"]["name"]);
    let m = &hpa["spec"]["metrics"][0]["pods"];
    assert_eq!(m["metric"]["name"], "sluice_http_requests_per_second");
    assert_eq!(m["target"]["averageValue"], "5k");
    let control = objects
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "edge-sluice-control")
        .unwrap();
    assert!(
        control["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"] == 9180),
        "the admin API inside the cluster: {control}"
    );
}

#[test]
fn a_daemonset_has_no_replicas_and_no_autoscaler() {
    let objects = checked(
        &template(&[
            "--set",
            "kind=DaemonSet",
            "--set",
            "autoscaling.enabled=true",
        ])
        .unwrap(),
    );
    let ds = find(&objects, "DaemonSet").unwrap();
    assert!(ds["spec"].get("replicas").is_none());
    assert!(find(&objects, "Deployment").is_none());
    assert!(find(&objects, "HorizontalPodAutoscaler").is_none());
}

#[test]
fn renders_that_cannot_run_fail_with_their_reason() {
    for (args, says) in [
        (
            vec!["--set", "mode=consul"],
            "mode: \"consul\" is not file or etcd",
        ),
        (
            vec!["--set", "kind=StatefulSet"],
            "kind: \"StatefulSet\" is not Deployment or DaemonSet",
        ),
        (
            vec!["--set", "mode=etcd", "--set", "etcd.adminKeySecret.name=k"],
            "etcd.endpoints: needed",
        ),
        (
            vec![
                "--set",
                "mode=etcd",
                "--set",
                "etcd.endpoints={http://etcd:2379}",
            ],
            "etcd.adminKeySecret.name: needed",
        ),
        (
            vec!["--set", "status.allow=null"],
            "give status.allow or status.keySecretName",
        ),
    ] {
        let err = template(&args).expect_err(&format!("{args:?} renders"));
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
