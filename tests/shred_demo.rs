//! The shredding demo (`examples/shred_demo.rs`), run as its own process:
//! after one shred, the shredded customer reads as deleted in every copy
//! (live store, topic, backup file, restored store) and the others read as
//! written in every copy.
#![cfg(feature = "redb")]

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/shred_demo`, which `cargo test` builds.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("examples")
        .join(format!("shred_demo{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn the_demo_shreds_one_customer_in_every_copy_and_keeps_the_others() {
    let out = Command::new(example()).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    // Before the shred every copy reads; the table shows each profile.
    let before = stdout.split("after keys.shred").next().unwrap();
    assert_eq!(before.matches("Main St").count(), 12, "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("after the shred: customer-2 readable in 0 of 4 copies, the others in 8 of 8"),
        "{stdout}"
    );
}
