//! `cove-bench --runtime qemu`: the VM runtime measured beside raw `qemu-system-x86_64` doing
//! the same, in one run (at most two VMs at once: every series runs one VM at a time).
//!
//! | metric | Cove | raw baseline (`raw.rs`) |
//! |---|---|---|
//! | first create | create → running of the first sandbox: cold boot, base snapshot saved, clone restored | cold boot until the agent answers |
//! | create from the base snapshot | create → running | restore of a saved booted VM (disk copy + `-incoming`) until the agent answers |
//! | exec | command `true` + attach until exit | none (raw QEMU has no exec; the row says so) |
//! | pause+resume | both operations | QMP `stop` + `cont` |
//! | suspend | the operation (memory + disk saved to the snapshot store) | `stop` + `migrate` to a file + quit |
//! | wake | the operation (`memory_restored: true`) | the same command line with `-incoming` until the agent answers |
//!
//! After each Cove series a command runs in the sandbox, so a broken VM fails the run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cove_client::Client;

use crate::args::{Args, MIB};
use crate::host;
use crate::measure::{dist_ms, progress, run_command, TEMPLATE};
use crate::report::{Machine, Metric, Report, Stats, Unit};
use crate::server::{create_sandbox, delete_sandbox, wait_succeeded, CoveServer, ServerSettings};

mod raw;

use raw::RawQemu;

/// Runs the qemu measurements; everything started is cleaned up, also on error.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let began = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let runs = args.scale().qemu_runs;
    let qemu = host::version_line("qemu-system-x86_64")?;
    let machine = Machine {
        cores: host::cores(),
        mem_total_gib: host::mem_total()? as f64 / (1024.0 * MIB as f64),
        kernel: host::kernel_release(),
        runc: host::version_line(&args.runc.display().to_string()).unwrap_or_default(),
        qemu: Some(qemu.clone()),
    };
    let accel = if cove_runtime::qemu::kvm_usable() {
        "kvm"
    } else {
        "tcg,thread=multi,tb-size=64"
    };
    progress(&format!(
        "{} cores, {:.1} GiB, Linux {}, {qemu}, accel {accel}",
        machine.cores, machine.mem_total_gib, machine.kernel
    ));

    let settings = ServerSettings {
        guest_agent: args.guest_agent_path(),
        cache_dir: args.cache_dir.clone(),
        runc: args.runc.clone(),
        verbose: args.verbose,
        network: cove_server::NetworkMode::Off,
        runtime: cove_server::RuntimeChoice::Qemu,
        user_namespaces: false,
    };
    let server = CoveServer::start(settings.clone()).await?;
    let client = server.client()?;
    server.ensure_release(&client, TEMPLATE).await?;
    let cove = measure_cove(&client, runs).await;
    let raw = match &cove {
        Ok(c) => measure_raw(args, &server, c, runs, accel).await,
        Err(_) => Err(anyhow::anyhow!("skipped")),
    };
    server.stop().await.context("clean up the server")?;
    let cove = cove?;
    let raw = raw?;

    let ms = |d: &[Duration]| dist_ms(d);
    let metrics = vec![
        Metric::new(
            "qemu_first_create",
            "qemu: first create → running",
            Unit::Ms,
            Stats::single(cove.first_create.as_secs_f64() * 1e3),
        )
        .baseline("raw qemu cold boot → agent answers", ms(&raw.boot)?)
        .note("boot + base snapshot saved + clone restored"),
        Metric::new(
            "qemu_create_from_base",
            "qemu: create from the base snapshot",
            Unit::Ms,
            ms(&cove.creates)?,
        )
        .baseline(
            "raw qemu restore of a booted VM → agent answers",
            ms(&raw.clone)?,
        ),
        Metric::new(
            "qemu_exec",
            "qemu: exec `true` round trip",
            Unit::Ms,
            ms(&cove.exec)?,
        )
        .note("no raw equivalent: QEMU itself has no exec"),
        Metric::new(
            "qemu_pause_resume",
            "qemu: pause+resume round trip",
            Unit::Ms,
            ms(&cove.pause_resume)?,
        )
        .baseline("QMP stop + cont", ms(&raw.pause_resume)?),
        Metric::new(
            "qemu_suspend",
            "qemu: suspend",
            Unit::Ms,
            ms(&cove.suspend)?,
        )
        .baseline("QMP stop + migrate to a file + quit", ms(&raw.save)?),
        Metric::new(
            "qemu_wake",
            "qemu: wake (memory restored)",
            Unit::Ms,
            ms(&cove.wake)?,
        )
        .baseline("qemu -incoming + cont → agent answers", ms(&raw.restore)?),
    ];
    Ok(Report::finish(
        args.quick,
        machine,
        started_at,
        began,
        metrics,
        Vec::new(),
    ))
}

/// Cove's samples.
struct CoveSamples {
    first_create: Duration,
    creates: Vec<Duration>,
    exec: Vec<Duration>,
    pause_resume: Vec<Duration>,
    suspend: Vec<Duration>,
    wake: Vec<Duration>,
    vcpus: u32,
    memory_mib: u64,
}

async fn measure_cove(client: &Client, runs: usize) -> anyhow::Result<CoveSamples> {
    progress("qemu: first create (cold boot and base snapshot)");
    let t0 = Instant::now();
    let id = create_sandbox(client, TEMPLATE).await?;
    let first_create = t0.elapsed();
    let sb = client.get_sandbox(&id).await.context("get the sandbox")?;
    delete_sandbox(client, &id).await?;

    progress(&format!("qemu: {runs} × create from the base snapshot"));
    let mut creates = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        let id = create_sandbox(client, TEMPLATE).await?;
        creates.push(t0.elapsed());
        delete_sandbox(client, &id).await?;
    }

    let id = create_sandbox(client, TEMPLATE).await?;
    let result = series(client, &id, runs).await;
    delete_sandbox(client, &id).await?;
    let (exec, pause_resume, suspend, wake) = result?;
    Ok(CoveSamples {
        first_create,
        creates,
        exec,
        pause_resume,
        suspend,
        wake,
        vcpus: sb.resources.vcpus,
        memory_mib: sb.resources.memory_mib,
    })
}

type Series = (Vec<Duration>, Vec<Duration>, Vec<Duration>, Vec<Duration>);

/// exec, pause+resume, suspend and wake samples of sandbox `id`.
async fn series(client: &Client, id: &str, runs: usize) -> anyhow::Result<Series> {
    let exec_runs = runs * 4;
    progress(&format!("qemu: {exec_runs} × exec `true`"));
    run_command(client, id, &["true"]).await?;
    let mut exec = Vec::new();
    for _ in 0..exec_runs {
        let t0 = Instant::now();
        run_command(client, id, &["true"]).await?;
        exec.push(t0.elapsed());
    }
    progress(&format!("qemu: {runs} × pause+resume, suspend, wake"));
    let mut pause_resume = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let op = client.pause_sandbox(id).await.context("pause")?;
        wait_succeeded(client, &op.id, "pause").await?;
        let op = client.resume_sandbox(id).await.context("resume")?;
        wait_succeeded(client, &op.id, "resume").await?;
        pause_resume.push(t0.elapsed());
    }
    run_command(client, id, &["true"]).await?;
    let (mut suspend, mut wake) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t0 = Instant::now();
        let op = client.suspend_sandbox(id).await.context("suspend")?;
        wait_succeeded(client, &op.id, "suspend").await?;
        suspend.push(t0.elapsed());
        let t0 = Instant::now();
        let op = client.wake_sandbox(id).await.context("wake")?;
        wait_succeeded(client, &op.id, "wake").await?;
        wake.push(t0.elapsed());
        let sb = client.get_sandbox(id).await.context("get the sandbox")?;
        if sb.memory_restored != Some(true) {
            bail!(
                "wake on qemu did not restore memory: {:?}",
                sb.memory_restored
            );
        }
    }
    run_command(client, id, &["true"]).await?;
    Ok((exec, pause_resume, suspend, wake))
}

/// The raw baseline's samples.
struct RawSamples {
    boot: Vec<Duration>,
    clone: Vec<Duration>,
    pause_resume: Vec<Duration>,
    save: Vec<Duration>,
    restore: Vec<Duration>,
}

async fn measure_raw(
    args: &Args,
    server: &CoveServer,
    cove: &CoveSamples,
    runs: usize,
    accel: &'static str,
) -> anyhow::Result<RawSamples> {
    let vm_cache = args.cache_dir.join("vm");
    let agent = args.guest_agent_path();
    let base_image = release_image(server.data_dir())?;
    let (boot_files, agent_disk) = crate::measure::blocking(|| {
        let boot = cove_runtime::qemu::image::ensure_boot_files(&vm_cache)?;
        let disk = cove_runtime::qemu::image::ensure_agent_disk(&vm_cache, &agent)?;
        Ok::<_, cove_runtime::RuntimeError>((boot, disk))
    })
    .context("the boot files the server prepared")?;
    let dir = tempfile::Builder::new()
        .prefix("cove-bench-rawvm-")
        .tempdir()
        .context("a scratch dir")?;
    let raw = RawQemu {
        dir: dir.path().to_path_buf(),
        kernel: boot_files.kernel,
        initramfs: boot_files.initramfs,
        agent_disk,
        base_image,
        vcpus: cove.vcpus.max(1),
        memory_mib: cove.memory_mib.max(64),
        accel,
    };

    progress(&format!("raw qemu: {runs} × cold boot"));
    let mut boot = Vec::new();
    for i in 0..runs {
        let t0 = Instant::now();
        let vm = raw.boot(&format!("boot{i}")).await?;
        boot.push(t0.elapsed());
        vm.kill().await;
    }

    progress(&format!("raw qemu: {runs} × stop+cont, save, restore"));
    let mut vm = raw.boot("life").await?;
    let mut pause_resume = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        vm.pause_resume().await?;
        pause_resume.push(t0.elapsed());
    }
    let (mut save, mut restore) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let state = dir.path().join(format!("life-{i}.mem"));
        let t0 = Instant::now();
        let disk = vm.save(&state).await?;
        save.push(t0.elapsed());
        let kept = dir.path().join(format!("life-{i}.qcow2"));
        std::fs::rename(&disk, &kept).context("keep the saved disk")?;
        let t0 = Instant::now();
        vm = raw.restore("life", &state, &kept).await?;
        restore.push(t0.elapsed());
        let _ = std::fs::remove_file(&state);
        let _ = std::fs::remove_file(&kept);
    }
    vm.kill().await;

    progress(&format!(
        "raw qemu: {runs} × restore of a booted VM (base snapshot)"
    ));
    let base = raw.boot("base").await?;
    let base_mem = dir.path().join("base.mem");
    let saved = base.save(&base_mem).await?;
    let base_disk = dir.path().join("base.qcow2");
    std::fs::rename(&saved, &base_disk).context("keep the base disk")?;
    let mut clone = Vec::new();
    for i in 0..runs {
        let t0 = Instant::now();
        let vm = raw
            .restore(&format!("clone{i}"), &base_mem, &base_disk)
            .await?;
        clone.push(t0.elapsed());
        vm.kill().await;
    }
    Ok(RawSamples {
        boot,
        clone,
        pause_resume,
        save,
        restore,
    })
}

/// The release image (`rootfs.ext4`) the server made for `tiny`.
fn release_image(data_dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join("releases").join(TEMPLATE);
    for entry in std::fs::read_dir(&dir).with_context(|| format!("read {}", dir.display()))? {
        let img = entry
            .context("read a release dir")?
            .path()
            .join("rootfs.ext4");
        if img.is_file() {
            return Ok(img);
        }
    }
    bail!("no rootfs.ext4 under {}", dir.display())
}
