//! The systemd unit in contrib/: systemd accepts it, and every option it
//! gives `farmem serve` exists.

use crate::common::*;
use std::process::Command;

#[test]
fn the_service_unit_is_valid_and_its_options_exist() {
    let unit =
        std::fs::read_to_string(repo().join("contrib/systemd/farmem-serve.service")).unwrap();
    let exec: String = unit
        .lines()
        .skip_while(|l| !l.starts_with("ExecStart="))
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("Restart"))
        .collect::<Vec<_>>()
        .join(" ");
    let help = farmem().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let options: Vec<&str> = exec
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .collect();
    assert!(options.len() >= 4, "{exec}");
    for o in options {
        assert!(help.contains(o), "{o} is not an option of farmem serve");
    }
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        skip(
            "the_service_unit_is_valid_and_its_options_exist",
            "systemd-analyze is not installed (Debian: systemd)",
        );
        return;
    }
    // systemd checks the unit offline, with the binary where it expects it.
    let dir = std::env::temp_dir().join(format!("farmem-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("farmem-serve.service");
    let here = env!("CARGO_BIN_EXE_farmem");
    std::fs::write(&path, unit.replace("/usr/local/bin/farmem", here)).unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && said.trim().is_empty(), "{said}");
    std::fs::remove_dir_all(&dir).unwrap();
}
