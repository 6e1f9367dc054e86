//! A link's MTU and state, read and set with ioctls (`SIOCGIFMTU`, `SIOCSIFMTU`,
//! `SIOCGIFFLAGS`, `SIOCSIFFLAGS`) in the calling thread's network namespace
//! (`/sys/class/net` shows the namespace `/sys` was mounted in, not the thread's).
#![allow(unsafe_code)] // ioctls on a zeroed `ifreq`, whose name is NUL-terminated.

use nix::libc;
use std::io;
use std::os::fd::AsRawFd as _;

/// What WireGuard adds to a packet at most: an outer IPv6 header (40), UDP (8), and
/// its own header and tag (32). The device's MTU is the native device's minus this.
pub const WIREGUARD_OVERHEAD: u32 = 80;

fn request(device: &str) -> io::Result<libc::ifreq> {
    let bytes = device.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {device:?}"),
        ));
    }
    // SAFETY: `ifreq` is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, b) in req.ifr_name.iter_mut().zip(bytes) {
        *slot = *b as libc::c_char;
    }
    Ok(req)
}

/// The MTU of `device`.
///
/// # Errors
/// When there is no such device here.
pub fn mtu(device: &str) -> io::Result<u32> {
    let mut req = request(device)?;
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name and writes `ifru_mtu`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU filled `ifru_mtu`.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::other(format!("MTU {mtu} of {device}")))
}

/// Brings `device` up (`ip link set DEV up`).
///
/// # Errors
/// When there is no such device here.
pub fn set_up(device: &str) -> io::Result<()> {
    let mut req = request(device)?;
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    // SAFETY: SIOCGIFFLAGS reads the name and writes `ifru_flags`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled `ifru_flags`.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads the name and `ifru_flags`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the MTU of `device`.
///
/// # Errors
/// When there is no such device here, or the MTU is out of its range.
pub fn set_mtu(device: &str, mtu: u32) -> io::Result<()> {
    let mut req = request(device)?;
    req.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("MTU {mtu}")))?;
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    // SAFETY: SIOCSIFMTU reads the name and `ifru_mtu`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFMTU, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
