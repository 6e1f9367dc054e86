//! The datapath's errors name what is at fault as typed fields: the directory that is
//! no bpffs, the generation not pinned, the endpoint whose policy does not fit.

use std::collections::BTreeSet;
use weft_datapath::{policy_entries, read_ipcache, Datapath, Error, MAX_POLICY_ENTRIES};
use weft_state::policy::{Allow, EndpointPolicy};

#[test]
fn a_directory_off_a_bpffs_is_refused_naming_it() {
    // The test's own directory: on the build's filesystem, never a bpffs.
    let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("not-a-bpffs");
    match Datapath::open(&root) {
        Err(Error::NotBpffs { path }) => assert_eq!(path, root),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("opened a datapath off a bpffs"),
    }
}

#[test]
fn a_generation_not_pinned_is_named() {
    let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-generations");
    std::fs::create_dir_all(&root).unwrap();
    match read_ipcache(&root, Some(7)) {
        Err(e @ Error::NoGeneration { .. }) => {
            assert!(
                matches!(&e, Error::NoGeneration { root: r, generation: Some(7) } if *r == root)
            );
            assert!(e.to_string().ends_with("no generation 7 pinned"), "{e}");
        }
        other => panic!("not NoGeneration: {:?}", other.map(|d| d.generation)),
    }
    let newest = read_ipcache(&root, None).map(|d| d.generation);
    assert!(matches!(
        newest,
        Err(Error::NoGeneration {
            generation: None,
            ..
        })
    ));
}

#[test]
fn a_policy_past_the_endpoints_entries_names_the_endpoint_and_the_limit() {
    let wide = |last: u16| EndpointPolicy {
        ingress_enforced: true,
        ingress: BTreeSet::from([Allow {
            identity: 0,
            protocol: 6,
            first: 1,
            last,
        }]),
        ..EndpointPolicy::default()
    };
    let fits = u16::try_from(MAX_POLICY_ENTRIES).unwrap();
    assert!(policy_entries(42, 7, &wide(fits)).is_ok());
    match policy_entries(42, 7, &wide(fits + 1)) {
        Err(Error::PolicyTooLarge { ifindex, max }) => {
            assert_eq!((ifindex, max), (42, MAX_POLICY_ENTRIES));
        }
        other => panic!("not PolicyTooLarge: {:?}", other.err()),
    }
}
