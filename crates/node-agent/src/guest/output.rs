//! [`OutputLimits`]: how much of each command's output a sandbox's guest agent keeps, passed to
//! the agent as command-line flags when the sandbox starts.

/// Default bytes of one command's output the agent keeps in memory (1 MiB).
pub const DEFAULT_OUTPUT_MEMORY_BYTES: u64 = 1 << 20;
/// Default bytes of one command's output kept at most, memory and disk (1 GiB).
pub const DEFAULT_OUTPUT_CAP_BYTES: u64 = 1 << 30;

/// Per-command output limits of the guest agents this node starts. A command's output beyond
/// `cap_bytes` keeps its first `cap_bytes − tail_bytes` bytes and its last `tail_bytes`; the
/// middle is dropped (the command reports `truncated`, readers get a gap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes kept in the agent's memory before spilling to the node's disk (default 1 MiB).
    pub memory_bytes: u64,
    /// Bytes kept at most per command (default 1 GiB).
    pub cap_bytes: u64,
    /// Bytes at the end of a long output always kept (default: half the cap).
    pub tail_bytes: Option<u64>,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            memory_bytes: DEFAULT_OUTPUT_MEMORY_BYTES,
            cap_bytes: DEFAULT_OUTPUT_CAP_BYTES,
            tail_bytes: None,
        }
    }
}

impl OutputLimits {
    /// The tail kept of a long output, in bytes.
    pub fn tail(&self) -> u64 {
        self.tail_bytes
            .unwrap_or(self.cap_bytes / 2)
            .min(self.cap_bytes)
    }

    /// The guest agent's flags for these limits.
    pub fn agent_args(&self) -> Vec<String> {
        vec![
            format!("--output-memory-bytes={}", self.memory_bytes),
            format!("--output-cap-bytes={}", self.cap_bytes),
            format!("--output-tail-bytes={}", self.tail()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_carry_every_limit() {
        let l = OutputLimits {
            memory_bytes: 10,
            cap_bytes: 100,
            tail_bytes: None,
        };
        assert_eq!(
            l.agent_args(),
            [
                "--output-memory-bytes=10",
                "--output-cap-bytes=100",
                "--output-tail-bytes=50"
            ]
        );
        let l = OutputLimits {
            tail_bytes: Some(1000),
            ..l
        };
        assert_eq!(l.tail(), 100);
    }
}
