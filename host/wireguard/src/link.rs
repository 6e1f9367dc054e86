//! The WireGuard device's MTU and state, through rtnetlink, in the calling thread's
//! network namespace (the netlink thread is started from it, and inherits it).

use std::io;
use weft_sys::netlink;

/// What WireGuard adds to a packet at most: an outer IPv6 header (40), UDP (8), and
/// its own header and tag (32). The device's MTU is the native device's minus this.
pub const WIREGUARD_OVERHEAD: u32 = 80;

fn check_name(device: &str) -> io::Result<String> {
    // IFNAMSIZ (16) with its NUL: the kernel would refuse the name anyway; saying so
    // here names the mistake.
    if device.is_empty() || device.len() >= 16 || device.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {device:?}"),
        ));
    }
    Ok(device.to_owned())
}

fn io_error(e: netlink::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// The MTU of `device`.
///
/// # Errors
/// When there is no such device here.
pub fn mtu(device: &str) -> io::Result<u32> {
    let name = check_name(device)?;
    netlink::blocking(None, move |h| async move { netlink::mtu(&h, &name).await }).map_err(io_error)
}

/// Brings `device` up (`ip link set DEV up`).
///
/// # Errors
/// When there is no such device here.
pub fn set_up(device: &str) -> io::Result<()> {
    let name = check_name(device)?;
    netlink::blocking(None, move |h| async move {
        netlink::configure(&h, &name, true, None).await
    })
    .map_err(io_error)
}

/// Sets the MTU of `device`.
///
/// # Errors
/// When there is no such device here, or the MTU is out of its range.
pub fn set_mtu(device: &str, mtu: u32) -> io::Result<()> {
    let name = check_name(device)?;
    netlink::blocking(None, move |h| async move {
        netlink::configure(&h, &name, false, Some(mtu)).await
    })
    .map_err(io_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_an_mtu_and_bad_names_are_refused() {
        assert!(mtu("lo").unwrap() >= 1280);
        assert_eq!(
            mtu("a-name-far-too-long").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(mtu("weft-none0").is_err());
    }
}
