//! Users and groups from the sandbox's `/etc/passwd` and `/etc/group`.
//!
//! The agent is a static binary without NSS, so it parses the files itself, on every request that
//! needs them (a sandbox may add users at any time; the files are small).

use std::path::{Path, PathBuf};

use cove_guest_protocol::ErrorCode;

use crate::error::AgentError;

/// One `/etc/passwd` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home directory.
    pub home: String,
    /// Login shell (may be empty).
    pub shell: String,
}

/// One `/etc/group` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Group name.
    pub name: String,
    /// Group id.
    pub gid: u32,
    /// Member login names.
    pub members: Vec<String>,
}

/// A snapshot of the user and group databases.
#[derive(Debug, Clone, Default)]
pub struct UserDb {
    users: Vec<User>,
    groups: Vec<Group>,
}

/// Where the databases live (`/etc` in the sandbox).
#[derive(Debug, Clone)]
pub struct UserFiles {
    etc: PathBuf,
}

impl Default for UserFiles {
    fn default() -> Self {
        Self {
            etc: PathBuf::from("/etc"),
        }
    }
}

impl UserFiles {
    /// Databases under another directory (tests).
    pub fn at(etc: impl Into<PathBuf>) -> Self {
        Self { etc: etc.into() }
    }

    /// Reads both files; a missing or unreadable file counts as empty.
    pub fn load(&self) -> UserDb {
        let read = |name: &str| std::fs::read(self.etc.join(name)).unwrap_or_default();
        UserDb::parse(&read("passwd"), &read("group"))
    }
}

impl UserDb {
    /// Parses the contents of `passwd` and `group`; malformed lines are skipped.
    pub fn parse(passwd: &[u8], group: &[u8]) -> Self {
        Self {
            users: parse_passwd(passwd),
            groups: parse_group(group),
        }
    }

    /// The user of a request: `None` means root (or, when the agent itself does not run as root,
    /// as in tests on a host, the agent's own user). Unknown names are `UnknownUser`.
    pub fn resolve(&self, name: Option<&str>) -> Result<User, AgentError> {
        let euid = nix::unistd::geteuid().as_raw();
        match name {
            None if euid != 0 => Ok(self.by_uid(euid).cloned().unwrap_or_else(|| User {
                name: euid.to_string(),
                uid: euid,
                gid: nix::unistd::getegid().as_raw(),
                home: "/".into(),
                shell: "/bin/sh".into(),
            })),
            None | Some("root") => Ok(self.by_name("root").cloned().unwrap_or_else(default_root)),
            Some(n) => self.by_name(n).cloned().ok_or_else(|| {
                AgentError::new(
                    ErrorCode::UnknownUser,
                    format!("no user {n:?} in /etc/passwd"),
                )
            }),
        }
    }

    /// The entry of a login name (the first one, like getpwnam).
    pub fn by_name(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// The first entry with this uid.
    pub fn by_uid(&self, uid: u32) -> Option<&User> {
        self.users.iter().find(|u| u.uid == uid)
    }

    /// The name of a uid, or the uid in decimal.
    pub fn user_name(&self, uid: u32) -> String {
        match self.users.iter().find(|u| u.uid == uid) {
            Some(u) => u.name.clone(),
            None if uid == 0 => "root".to_string(),
            None => uid.to_string(),
        }
    }

    /// The name of a gid, or the gid in decimal.
    pub fn group_name(&self, gid: u32) -> String {
        match self.groups.iter().find(|g| g.gid == gid) {
            Some(g) => g.name.clone(),
            None if gid == 0 => "root".to_string(),
            None => gid.to_string(),
        }
    }

    /// The user's group list: the primary group, then every group naming the user as a member.
    pub fn groups_of(&self, user: &User) -> Vec<u32> {
        let mut gids = vec![user.gid];
        for g in &self.groups {
            if g.members.iter().any(|m| m == &user.name) && !gids.contains(&g.gid) {
                gids.push(g.gid);
            }
        }
        gids
    }
}

impl User {
    /// The home directory as a path.
    pub fn home_path(&self) -> &Path {
        Path::new(&self.home)
    }
}

fn default_root() -> User {
    User {
        name: "root".into(),
        uid: 0,
        gid: 0,
        home: "/root".into(),
        shell: "/bin/sh".into(),
    }
}

fn lines(data: &[u8]) -> impl Iterator<Item = &str> {
    data.split(|&b| b == b'\n')
        .filter_map(|l| std::str::from_utf8(l).ok())
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Parses `/etc/passwd`: `name:password:uid:gid:gecos:home:shell`.
pub fn parse_passwd(data: &[u8]) -> Vec<User> {
    lines(data)
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() < 7 || f[0].is_empty() {
                return None;
            }
            Some(User {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_string(),
                shell: f[6].to_string(),
            })
        })
        .collect()
}

/// Parses `/etc/group`: `name:password:gid:member,member`.
pub fn parse_group(data: &[u8]) -> Vec<Group> {
    lines(data)
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() < 4 || f[0].is_empty() {
                return None;
            }
            Some(Group {
                name: f[0].to_string(),
                gid: f[2].parse().ok()?,
                members: f[3]
                    .split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(String::from)
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &[u8] = b"root:x:0:0:root:/root:/bin/bash\n\
        # comment\n\
        broken line\n\
        bad:x:notanumber:1:::\n\
        user:x:1000:1000:User,,,:/home/user:/bin/bash\r\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin";
    const GROUP: &[u8] = b"root:x:0:\nsudo:x:27:user,other\nuser:x:1000:\ndocker:x:999: user \n";

    #[test]
    fn parses_passwd() {
        let db = UserDb::parse(PASSWD, GROUP);
        let u = db.resolve(Some("user")).expect("user");
        assert_eq!(
            (u.uid, u.gid, u.home.as_str(), u.shell.as_str()),
            (1000, 1000, "/home/user", "/bin/bash")
        );
        assert_eq!(db.resolve(None).expect("root").uid, 0);
        assert_eq!(db.resolve(Some("nobody")).expect("nobody").uid, 65534);
        assert!(db.by_name("bad").is_none());
        let err = db.resolve(Some("ghost")).expect_err("unknown");
        assert_eq!(err.code, ErrorCode::UnknownUser);
    }

    #[test]
    fn supplementary_groups_and_names() {
        let db = UserDb::parse(PASSWD, GROUP);
        let u = db.resolve(Some("user")).expect("user");
        assert_eq!(db.groups_of(&u), vec![1000, 27, 999]);
        assert_eq!(db.user_name(1000), "user");
        assert_eq!(db.user_name(4242), "4242");
        assert_eq!(db.group_name(27), "sudo");
        assert_eq!(db.group_name(5), "5");
    }

    #[test]
    fn empty_databases_still_know_root() {
        let db = UserDb::parse(b"", b"");
        let root = db.resolve(None).expect("root");
        assert_eq!((root.uid, root.home.as_str()), (0, "/root"));
        assert_eq!(db.user_name(0), "root");
    }
}
