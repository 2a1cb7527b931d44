//! Templates from a file on the fake node: a file release carries its defaults into creates,
//! a release in use is not deleted, bad files are refused before anything is recorded.

use cove_api_types::{CreateSandboxRequest, CreateTemplateQuery, ErrorCode, OperationState};

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

fn query(name: &str) -> CreateTemplateQuery {
    CreateTemplateQuery {
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_file_release_gives_creates_its_defaults_and_is_kept_while_used() {
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
}

#[tokio::test]
async fn bad_files_and_parents_record_nothing() {
    let h = Harness::new().await;
    for (file, want) in [
        ("FROM base\nEXPOSE 80\n", ErrorCode::InvalidArgument),
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
            h.cp.create_template_from_file(query("web"), bytes::Bytes::from_static(b"not a tar"))
                .await
        ),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(h.cp.get_template("web").await),
        ErrorCode::TemplateNotFound
    );
}
