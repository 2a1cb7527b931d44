//! Making sure descriptors 0, 1 and 2 are open before anything else opens files, so no pipe or
//! socket of the agent is ever handed out as a process's stdio by accident.

use std::fs::OpenOptions;
use std::os::fd::IntoRawFd;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};

/// Opens `/dev/null` on each of 0, 1, 2 that is closed.
pub fn ensure_standard_fds() {
    for fd in 0..3 {
        if fcntl(fd, FcntlArg::F_GETFD) == Err(Errno::EBADF) {
            // The lowest free descriptor is `fd`: the lower ones are open by now.
            if let Ok(f) = OpenOptions::new().read(true).write(true).open("/dev/null") {
                let _ = f.into_raw_fd();
            }
        }
    }
}
