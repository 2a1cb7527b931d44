//! Templates from a file on the fake node: a file release carries its defaults into creates,
//! a release in use is not deleted, bad files are refused before anything is recorded.

use cove_api_types::{CreateSandboxRequest, EgressPolicy, ErrorCode, OperationState};
use cove_control_plane::TemplateFileBuild;
use cove_node_api::{NodeCapabilities, NodeError};
use cove_test_support::{Call, FakeNode, Fault};

use crate::harness::{as_org, as_system};
use crate::harness::{code, Harness};

fn context(file: &str) -> bytes::Bytes {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(file.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "Dockerfile", file.as_bytes())
        .expect("append");
    b.into_inner().expect("tar").into()
}

fn query(name: &str) -> TemplateFileBuild {
    TemplateFileBuild {
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_file_release_gives_creates_its_defaults_and_is_kept_while_used() {
    as_system(async {
        let h = Harness::new().await;
        let file = "FROM base:1\nENV MODE=prod\nWORKDIR /srv\nUSER app\n";
        let built =
            h.cp.create_template_from_file(query("web"), context(file))
                .await
                .expect("accepted");
        assert_eq!(
            h.settle(&built.operation.id).await.state,
            OperationState::Succeeded
        );
        assert_eq!(
            built.release.build_operation_id.as_deref(),
            Some(built.operation.id.as_str())
        );
        let t = h.cp.get_template("web").await.expect("template");
        assert_eq!(t.file.as_deref(), Some(file));
        assert_eq!(
            t.releases[0].build_operation_id.as_deref(),
            Some(built.operation.id.as_str())
        );
        assert_eq!(
            (t.defaults.user.as_str(), t.defaults.workdir.as_str()),
            ("app", "/srv")
        );
        assert!(h
            .cp
            .list_templates()
            .await
            .expect("list")
            .templates
            .iter()
            .any(|t| t.name == "web"));

        let id = h
            .running_with(CreateSandboxRequest {
                template: Some("web".into()),
                ..Default::default()
            })
            .await;
        let s = h.sandbox(&id).await;
        assert_eq!((s.user.as_str(), s.cwd.as_str()), ("app", "/srv"));
        assert_eq!(s.env.get("MODE").map(String::as_str), Some("prod"));
        // Inherited from base.
        assert_eq!(s.env.get("LANG").map(String::as_str), Some("C.UTF-8"));

        assert_eq!(
            code(h.cp.delete_release("web", 1).await),
            ErrorCode::FailedPrecondition
        );
        assert_eq!(
            code(h.cp.delete_template("web").await),
            ErrorCode::FailedPrecondition
        );
        assert_eq!(
            code(h.cp.delete_template("base").await),
            ErrorCode::FailedPrecondition
        );
        assert_eq!(
            code(h.cp.delete_release("web", 9).await),
            ErrorCode::ReleaseNotFound
        );
        assert_eq!(
            code(h.cp.build_release("web", Default::default()).await),
            ErrorCode::FailedPrecondition
        );
    })
    .await;
}

#[tokio::test]
async fn bad_files_and_parents_record_nothing() {
    as_system(async {
        let h = Harness::new().await;
        for (file, want) in [
            ("FROM base\nVOLUME /data\n", ErrorCode::InvalidArgument),
            ("FROM base\nEXPOSE http\n", ErrorCode::InvalidArgument),
            ("ENV A=1\n", ErrorCode::InvalidArgument),
            ("FROM base\nCOPY ../x /y\n", ErrorCode::InvalidArgument),
            ("FROM base\nCOPY missing /y\n", ErrorCode::InvalidArgument),
            ("FROM nothing\n", ErrorCode::TemplateNotFound),
            ("FROM base:9\n", ErrorCode::ReleaseNotFound),
        ] {
            let got = code(
                h.cp.create_template_from_file(query("web"), context(file))
                    .await,
            );
            assert_eq!(got, want, "{file}");
        }
        assert_eq!(
            code(
                h.cp.create_template_from_file(query("Bad Name"), context("FROM base\n"))
                    .await
            ),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(
                h.cp.create_template_from_file(query("tiny"), context("FROM base\n"))
                    .await
            ),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(
                h.cp.create_template_from_file(
                    query("web"),
                    bytes::Bytes::from_static(b"not a tar")
                )
                .await
            ),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(h.cp.get_template("web").await),
            ErrorCode::TemplateNotFound
        );
    })
    .await;
}

#[tokio::test]
async fn a_file_release_launches_with_its_digest_and_its_stored_copy_goes_with_the_last_user() {
    as_system(async {
        let h = Harness::new().await;
        let file = "FROM base:1\nRUN make\n";
        for _ in 0..2 {
            let built =
                h.cp.create_template_from_file(query("web"), context(file))
                    .await
                    .expect("accepted");
            assert_eq!(
                h.settle(&built.operation.id).await.state,
                OperationState::Succeeded
            );
        }
        let t = h.cp.get_template("web").await.expect("template");
        let digest = t.releases[0].digest.clone().expect("digest");
        // The fake's digest is fixed per template: both releases share one stored copy.
        assert_eq!(t.releases[1].digest.as_deref(), Some(digest.as_str()));

        let id = h
            .running_with(CreateSandboxRequest {
                template: Some("web".into()),
                release: Some(2),
                ..Default::default()
            })
            .await;
        let launch = h.node.launch_of(&id).expect("launched");
        assert_eq!(launch.release_digest.as_deref(), Some(digest.as_str()));
        let base = h.running().await;
        assert_eq!(
            h.node.launch_of(&base).expect("launched").release_digest,
            None
        );

        // Release 2 still needs the stored copy.
        h.cp.delete_release("web", 1)
            .await
            .expect("delete release 1");
        assert_eq!(h.node.count(Call::RemoveStoredRelease), 0);
        let op = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.settle(&op.id).await;
        h.cp.delete_template("web")
            .await
            .expect("delete the template");
        assert_eq!(h.node.count_on(Call::RemoveStoredRelease, &digest), 1);
    })
    .await;
}

#[tokio::test]
async fn a_build_policy_needs_a_node_network() {
    as_system(async {
        let node = FakeNode::with_capabilities(NodeCapabilities {
            runtime: "runc".into(),
            boundary: "container".into(),
            pause: true,
            suspend_memory: false,
            snapshot_store: "file".into(),
            network: false,
            user_namespaces: false,
            volumes: false,
            attach_volumes: false,
        });
        let h = Harness::with(node, |_| {}).await;
        let mut q = query("web");
        q.network = Some(EgressPolicy::offline());
        assert_eq!(
            code(
                h.cp.create_template_from_file(q, context("FROM base:1\nRUN true\n"))
                    .await
            ),
            ErrorCode::NotImplemented
        );
        assert_eq!(
            code(h.cp.get_template("web").await),
            ErrorCode::TemplateNotFound,
            "nothing recorded"
        );
        // The default policy is fine: steps then have loopback only.
        let built =
            h.cp.create_template_from_file(query("web"), context("FROM base:1\nRUN true\n"))
                .await
                .expect("accepted");
        assert_eq!(
            h.settle(&built.operation.id).await.state,
            OperationState::Succeeded
        );
    })
    .await;
}

/// Issue 26: an org key's `FROM oci-archive:<host path>` is refused before anything is
/// recorded (never a host path), and on a node without an OCI import directory any
/// `oci-archive:` build fails with `oci_import_disabled`; no message quotes a file.
#[tokio::test]
async fn oci_archive_takes_no_host_path_and_needs_an_import_dir() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.create_org(cove_api_types::CreateOrgRequest {
            id: "tenant".into(),
            ..Default::default()
        })
        .await
        .expect("org");
        for path in ["/etc/shadow", "/dev/zero", "../../etc/shadow", "a/../../b"] {
            let file = format!("FROM oci-archive:{path}\n");
            let err = as_org(
                "tenant",
                h.cp.create_template_from_file(query("stolen"), context(&file)),
            )
            .await
            .expect_err("refused");
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{path}: {err}");
            assert!(err.to_string().contains("OCI import directory"), "{err}");
            assert!(!err.to_string().contains("root:"), "{err}");
        }
        assert_eq!(
            code(h.cp.get_template("stolen").await),
            ErrorCode::TemplateNotFound,
            "nothing recorded"
        );

        let built = as_org(
            "tenant",
            h.cp.create_template_from_file(
                query("imported"),
                context("FROM oci-archive:app.tar\n"),
            ),
        )
        .await
        .expect("accepted");
        let op = h.settle(&built.operation.id).await;
        assert_eq!(op.state, OperationState::Failed);
        let err = op.error.expect("error");
        assert_eq!(err.code, ErrorCode::OciImportDisabled, "{}", err.message);
        assert_eq!(ErrorCode::OciImportDisabled.as_str(), "oci_import_disabled");
        assert!(err.message.contains("--oci-import-dir"), "{}", err.message);
    })
    .await;
}

/// Issue 27 finding 9: template names are shared by every org, so a template whose first
/// build fails (or is cancelled) must not keep its name: it is gone, its failed release is not
/// listed, and another org can take the name. A failed later build keeps the template.
#[tokio::test]
async fn a_failed_first_build_leaves_no_template_and_frees_the_name() {
    as_system(async {
        let h = Harness::new().await;
        for org in ["a", "b"] {
            h.cp.create_org(cove_api_types::CreateOrgRequest {
                id: org.into(),
                ..Default::default()
            })
            .await
            .expect("org");
        }
        h.node.inject(
            Call::BuildRelease,
            Fault::fail(NodeError::Build("RUN exited 1".into())),
        );
        let failed = as_org(
            "a",
            h.cp.create_template_from_file(query("web"), context("FROM base:1\nRUN false\n")),
        )
        .await
        .expect("accepted");
        assert_eq!(
            h.settle(&failed.operation.id).await.state,
            OperationState::Failed
        );
        assert_eq!(
            code(as_org("a", h.cp.get_template("web")).await),
            ErrorCode::TemplateNotFound
        );
        assert!(!h
            .cp
            .list_templates()
            .await
            .expect("list")
            .templates
            .iter()
            .any(|t| t.name == "web"));

        // Another org takes the name, and sees none of the first org's releases.
        let built = as_org(
            "b",
            h.cp.create_template_from_file(query("web"), context("FROM base:1\n")),
        )
        .await
        .expect("name is free");
        assert_eq!(
            h.settle(&built.operation.id).await.state,
            OperationState::Succeeded
        );
        let t = as_org("b", h.cp.get_template("web"))
            .await
            .expect("template");
        assert_eq!(t.org.as_deref(), Some("b"));
        let numbers: Vec<u32> = t.releases.iter().map(|r| r.number).collect();
        assert_eq!(numbers, [built.release.number]);
        assert_ne!(built.release.number, failed.release.number, "never reused");

        // A failed later build keeps the template and its ready release.
        h.node.inject(
            Call::BuildRelease,
            Fault::fail(NodeError::Build("RUN exited 1".into())),
        );
        let again = as_org(
            "b",
            h.cp.create_template_from_file(query("web"), context("FROM base:1\nRUN false\n")),
        )
        .await
        .expect("accepted");
        assert_eq!(
            h.settle(&again.operation.id).await.state,
            OperationState::Failed
        );
        let t = as_org("b", h.cp.get_template("web")).await.expect("kept");
        assert_eq!(t.latest_release, Some(built.release.number));
    })
    .await;
}

#[tokio::test]
async fn a_cancelled_first_build_leaves_no_template() {
    as_system(async {
        let h = Harness::new().await;
        h.node.inject(Call::BuildRelease, Fault::hang());
        let building =
            h.cp.create_template_from_file(query("web"), context("FROM base:1\nRUN sleep 1d\n"))
                .await
                .expect("accepted");
        // `base` release 1, then this build.
        h.node.wait_for_calls(Call::BuildRelease, 2).await;
        let done =
            h.cp.operations()
                .cancel(&building.operation.id)
                .await
                .expect("cancel");
        assert_eq!(done.state, OperationState::Cancelled);
        // The dropped build records its failure on a task of its own: bounded wait for it.
        // Both the template's removal and its releases' end are waited for: they are two writes.
        let mut gone = false;
        for _ in 0..2000 {
            let template_gone = matches!(
                h.cp.get_template("web").await,
                Err(e) if e.code() == ErrorCode::TemplateNotFound
            );
            let releases = h.cp.store().list_releases("web").await.expect("releases");
            if template_gone
                && releases
                    .iter()
                    .all(|r| r.state == cove_api_types::ReleaseState::Deleted)
            {
                gone = true;
                break;
            }
            tokio::task::spawn_blocking(|| std::thread::sleep(std::time::Duration::from_millis(5)))
                .await
                .expect("sleep");
        }
        assert!(
            gone,
            "a cancelled first build kept its template or a release not deleted"
        );
    })
    .await;
}

/// A context tar of `(path, content)` files.
fn context_of(files: &[(&str, &str)]) -> bytes::Bytes {
    let mut b = tar::Builder::new(Vec::new());
    for (path, content) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, path, content.as_bytes())
            .expect("append");
    }
    b.into_inner().expect("tar").into()
}

#[tokio::test]
async fn stages_dockerignore_and_cmd_reach_the_release() {
    as_system(async {
        let h = Harness::new().await;
        // The last stage starts FROM an earlier one and keeps its defaults; CMD is the start
        // command.
        let file = "FROM base:1 AS build\nENV STAGE=build\nUSER builder\nFROM base:1 AS other\n\
                    ENV OTHER=1\nFROM build\nCOPY --from=other /etc /etc-of-other\nCMD [\"app\", \"--serve\"]\n";
        let built =
            h.cp.create_template_from_file(query("web"), context(file))
                .await
                .expect("accepted");
        assert_eq!(
            h.settle(&built.operation.id).await.state,
            OperationState::Succeeded
        );
        let t = h.cp.get_template("web").await.expect("template");
        assert_eq!(t.defaults.user, "builder");
        assert_eq!(
            t.defaults.env.get("STAGE").map(String::as_str),
            Some("build")
        );
        assert_eq!(t.defaults.env.get("OTHER"), None);
        assert_eq!(t.defaults.start.as_deref(), Some("exec 'app' '--serve'"));

        // `COPY --from` a template that does not exist; a source `.dockerignore` excludes; a
        // wildcard that matches nothing: refused before anything is recorded.
        let e =
            h.cp.create_template_from_file(
                query("web2"),
                context("FROM base:1\nCOPY --from=nosuch:1 /a /b\n"),
            )
            .await
            .expect_err("no template");
        assert_eq!(code::<()>(Err(e)), ErrorCode::TemplateNotFound);
        for (files, want) in [
            (
                vec![
                    ("Dockerfile", "FROM base:1\nCOPY secret.txt /x\n"),
                    (".dockerignore", "*.txt\n"),
                    ("secret.txt", "s"),
                ],
                "line 2: COPY source secret.txt is not in the build context",
            ),
            (
                vec![
                    ("Dockerfile", "FROM base:1\n\nCOPY *.py /app/\n"),
                    ("a.js", ""),
                ],
                "line 3: COPY source *.py matches nothing in the build context",
            ),
        ] {
            let e =
                h.cp.create_template_from_file(query("web2"), context_of(&files))
                    .await
                    .expect_err("refused");
            assert!(e.to_string().contains(want), "{e}");
        }
        assert_eq!(
            code(h.cp.get_template("web2").await),
            ErrorCode::TemplateNotFound
        );
    })
    .await;
}
