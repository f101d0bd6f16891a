//! Plans for the machines of seed 000 (2 x 8 cores and 4 x 8 cores), from
//! fixture sysfs trees, and placement applied for real on this machine.

use farmem_numa::plan::{policy_plan, xy_plan, MemPolicy, Placement};
use farmem_numa::topology::Topology;
use farmem_numa::NumaError;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

#[test]
fn two_node_machine() {
    let t = Topology::read(&fixture("sysfs-2node")).unwrap();
    assert_eq!(t.ids(), vec![0, 1]);
    assert_eq!(t.nodes[0].cpus.len(), 16, "8 cores + 8 hyperthreads");
    assert_eq!(t.nodes[1].cpus[0], 8);
    assert_eq!(t.distances, vec![vec![10, 21], vec![21, 10]]);
    assert_eq!(t.nodes[0].mem_total, 32 << 30);
    assert!(t.render().starts_with("available: 2 nodes (0-1)"));

    let cells = xy_plan(&t).unwrap();
    assert_eq!(cells.len(), 4);
    let c01 = cells
        .iter()
        .find(|c| c.mem_node == 0 && c.cpu_node == 1)
        .unwrap();
    assert_eq!(c01.placement.mem, MemPolicy::Bind(vec![0]));
    assert_eq!(c01.placement.cpus.as_ref().unwrap(), &t.nodes[1].cpus);
    assert_eq!(c01.placement.name, "--membind=0 --cpunodebind=1");

    let names: Vec<String> = policy_plan(&t)
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(
        names,
        [
            "default",
            "--membind=0 --cpunodebind=0",
            "--membind=1 --cpunodebind=1",
            "--localalloc",
            "--interleave=0-1",
            "--preferred=0",
            "--preferred=1"
        ]
    );
}

#[test]
fn four_node_machine() {
    let t = Topology::read(&fixture("sysfs-4node")).unwrap();
    assert_eq!(t.ids(), vec![0, 1, 2, 3]);
    assert_eq!(t.distances[0], vec![10, 16, 16, 22]);
    let cells = xy_plan(&t).unwrap();
    assert_eq!(cells.len(), 16);
    // X outer, Y inner; every cell binds memory to X and CPUs to Y's CPUs.
    for (k, c) in cells.iter().enumerate() {
        assert_eq!((c.mem_node, c.cpu_node), (k / 4, k % 4));
        assert_eq!(c.placement.mem, MemPolicy::Bind(vec![c.mem_node]));
        assert_eq!(
            c.placement.cpus.as_ref().unwrap(),
            &t.nodes[c.cpu_node].cpus
        );
    }
    let plan = policy_plan(&t).unwrap();
    assert_eq!(plan.len(), 1 + 4 + 2 + 4);
    assert!(plan.iter().any(|p| p.name == "--interleave=0-3"));
}

#[test]
fn flags_are_validated_against_the_topology() {
    let t = Topology::read(&fixture("sysfs-2node")).unwrap();
    let p = Placement::from_flags(&t, Some("1"), Some("0"), None, false, None).unwrap();
    assert_eq!(p.name, "--membind=1 --cpunodebind=0");
    let all = Placement::from_flags(&t, None, None, Some("all"), false, None).unwrap();
    assert_eq!(all.mem, MemPolicy::Interleave(vec![0, 1]));
    assert!(matches!(
        Placement::from_flags(&t, Some("5"), None, None, false, None),
        Err(NumaError::NoSuchNode { node: 5, .. })
    ));
    assert!(Placement::from_flags(&t, Some("0"), None, Some("1"), false, None).is_err());
    assert!(Placement::from_flags(&t, Some("x"), None, None, false, None).is_err());
}

#[test]
fn placement_applies_for_real() {
    let t = Topology::read(Path::new("/sys")).unwrap();
    let n = t.ids()[0];
    let p = Placement::from_flags(
        &t,
        Some(&n.to_string()),
        Some(&n.to_string()),
        None,
        false,
        None,
    )
    .unwrap();
    let out = farmem_numa::run::run(&["cat".into(), "/proc/self/status".into()], &p).unwrap();
    assert!(out.status.success());
    let status: String = out.lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(
        field("Cpus_allowed_list:"),
        farmem_numa::topology::format_list(&t.nodes[0].cpus)
    );
    assert_eq!(
        field("Mems_allowed_list:"),
        farmem_numa::topology::format_list(&t.ids())
    );
    // The memory policy shows in numa_maps as "bind:N".
    let out = farmem_numa::run::run(&["cat".into(), "/proc/self/numa_maps".into()], &p).unwrap();
    assert!(
        out.lines
            .iter()
            .any(|(_, l)| l.contains(&format!("bind:{n}"))),
        "{:?}",
        out.lines.first()
    );
}
