use super::*;
use crate::entry::file_name;
use farmem_wire::ServerAddr;
use std::collections::HashMap;
use std::fs;
use std::net::IpAddr;
use std::time::Duration;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

#[test]
fn launchers_are_detected_in_order() {
    let l = Launch::detect(env(&[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("PMIX_NAMESPACE", "1873477633"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "9"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!((l.launcher, l.rank, l.size), ("Open MPI", 2, 4));
    assert_eq!(l.job, "1873477633");
    let l = Launch::detect(env(&[
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "3"),
        ("SLURM_JOB_ID", "77"),
        ("SLURM_STEP_ID", "0"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(
        (l.launcher, l.rank, l.size, l.job.as_str()),
        ("Slurm", 1, 3, "77.0")
    );
    let l = Launch::detect(env(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]))
        .unwrap()
        .unwrap();
    assert_eq!((l.launcher, l.job.as_str()), ("MPICH (PMI)", ""));
    assert_eq!(Launch::detect(env(&[])).unwrap(), None);
}

#[test]
fn the_command_line_overrides_the_launcher() {
    let slurm = [("SLURM_PROCID", "1"), ("SLURM_NTASKS", "3")];
    let l = Launch::resolve(None, None, None, env(&slurm)).unwrap();
    assert_eq!((l.launcher, l.rank, l.size), ("Slurm", 1, 3));
    let l = Launch::resolve(None, Some(5), Some("j1".into()), env(&slurm)).unwrap();
    assert_eq!((l.rank, l.size, l.job.as_str()), (1, 5, "j1"));
    let l = Launch::resolve(Some(0), Some(2), None, env(&[])).unwrap();
    assert_eq!((l.launcher, l.rank, l.size), ("command line", 0, 2));
    assert!(Launch::resolve(None, None, None, env(&[]))
        .unwrap_err()
        .to_string()
        .contains("mpirun"));
    assert!(Launch::resolve(Some(3), Some(2), None, env(&[])).is_err());
}

#[test]
fn bad_launcher_values_are_refused() {
    let e = Launch::detect(env(&[("PMIX_RANK", "0"), ("PMIX_NAMESPACE", "x")])).unwrap_err();
    assert!(e.to_string().contains("--size"), "{e}");
    let e = Launch::detect(env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")])).unwrap_err();
    assert!(e.to_string().contains("PMI_RANK=x"), "{e}");
    let e = Launch::detect(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "2")])).unwrap_err();
    assert!(e.to_string().contains("from 0 to 1"), "{e}");
    let e = Launch::detect(env(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_JOB_ID", "a/b"),
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("job identifier"), "{e}");
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fm-rdv-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

fn launch(job: &str, rank: u32, size: u32) -> Launch {
    Launch {
        launcher: "test",
        job: job.into(),
        rank,
        size,
    }
}

#[test]
fn a_complete_live_job_is_found_in_rank_order() {
    let dir = tmpdir("live");
    let l0 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a0 = ServerAddr::from(l0.local_addr().unwrap());
    let a1 = ServerAddr::from(l1.local_addr().unwrap());
    let _p1 = publish(&dir, &Entry::new(&launch("j", 1, 2), &a1)).unwrap();
    let p0 = publish(&dir, &Entry::new(&launch("j", 0, 2), &a0)).unwrap();
    let f = wait(&dir, Duration::from_secs(5)).unwrap();
    assert_eq!(f.servers, vec![a0, a1]);
    assert_eq!(f.job, "j");
    // No temporary file is left behind.
    let names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|d| d.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let path = p0.path().to_path_buf();
    drop(p0);
    assert!(!path.exists(), "the entry is removed when its server stops");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_rank_times_out_naming_it() {
    let dir = tmpdir("missing");
    let l0 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a0 = ServerAddr::from(l0.local_addr().unwrap());
    let _p = publish(&dir, &Entry::new(&launch("j", 0, 3), &a0)).unwrap();
    let e = wait(&dir, Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("1 of 3 ranks") && e.contains("missing ranks 1, 2"),
        "{e}"
    );
    assert!(e.contains("FARMEM_RENDEZVOUS_TIMEOUT"), "{e}");
    let empty = tmpdir("empty");
    let e = wait(&empty, Duration::from_millis(100))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no memory server published"), "{e}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_stale_earlier_job_is_not_used() {
    let dir = tmpdir("stale");
    // An earlier job, complete, whose servers are gone.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        ServerAddr::from(l.local_addr().unwrap())
    };
    let mut old0 = Entry::new(&launch("old", 0, 2), &gone);
    old0.published_ms -= 60_000;
    let mut old1 = Entry::new(&launch("old", 1, 2), &gone);
    old1.published_ms -= 60_000;
    std::mem::forget(publish(&dir, &old0).unwrap());
    std::mem::forget(publish(&dir, &old1).unwrap());
    let e = wait(&dir, Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not answer") && e.contains("stale"), "{e}");
    // The new job's rank 0 replaces the old rank 0; rank 1 is still the
    // old job's, so the client waits, naming it.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = ServerAddr::from(l.local_addr().unwrap());
    let _p0 = publish(&dir, &Entry::new(&launch("new", 0, 2), &a)).unwrap();
    let e = wait(&dir, Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("job \"new\"") && e.contains("missing rank 1"),
        "{e}"
    );
    assert!(
        e.contains("rank-1.json: job \"old\"") && e.contains("stale"),
        "{e}"
    );
    let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a1 = ServerAddr::from(l1.local_addr().unwrap());
    let _p1 = publish(&dir, &Entry::new(&launch("new", 1, 2), &a1)).unwrap();
    let f = wait(&dir, Duration::from_secs(5)).unwrap();
    assert_eq!(f.servers, vec![a, a1]);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn junk_files_are_named_and_skipped() {
    let dir = tmpdir("junk");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("rank-0.json"), "{not json").unwrap();
    fs::write(dir.join("notes.txt"), "hello").unwrap();
    let e = wait(&dir, Duration::from_millis(100))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no usable entry") && e.contains("rank-0.json: not an entry"),
        "{e}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unwritable_directory_is_a_clear_error() {
    let dir = tmpdir("file");
    fs::write(&dir, "a file, not a directory").unwrap();
    let a: ServerAddr = "127.0.0.1:1".parse().unwrap();
    let e = publish(&dir, &Entry::new(&launch("j", 0, 1), &a))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot write the rendezvous directory"), "{e}");
    let e = wait(&dir, Duration::from_millis(100))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read the rendezvous directory"), "{e}");
    fs::remove_file(&dir).unwrap();
}

#[test]
fn unspecified_hosts_are_advertised_as_this_node() {
    let a: ServerAddr = "127.0.0.1:5".parse().unwrap();
    assert_eq!(advertised(&a).unwrap(), a);
    let any: ServerAddr = "0.0.0.0:5".parse().unwrap();
    match advertised(&any) {
        Ok(ServerAddr::Tcp { host, port }) => {
            assert_eq!(port, 5);
            assert!(!host.parse::<IpAddr>().unwrap().is_unspecified());
        }
        Ok(other) => panic!("{other}"),
        // A machine with loopback only says so.
        Err(e) => assert!(e.to_string().contains("--listen"), "{e}"),
    }
}

proptest::proptest! {
    /// Whatever bytes a file holds, reading it never panics, and a
    /// valid entry round-trips.
    #[test]
    fn parse_never_panics(s in ".{0,300}", rank in 0u32..8, size in 1u32..8) {
        let _ = Entry::parse("rank-0.json", &s);
        let l = Launch { launcher: "t", job: "j".into(), rank: rank % size, size };
        let e = Entry::new(&l, &"10.0.0.1:7".parse().unwrap());
        let text = serde_json::to_string(&e).unwrap();
        let (back, _) = Entry::parse(&file_name(e.rank), &text).unwrap();
        proptest::prop_assert_eq!(back, e);
    }
}
