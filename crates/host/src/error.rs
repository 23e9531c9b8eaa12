//! The one error type of this crate: every failure names the operation, the
//! object it was applied to and the kernel's answer.

use std::io;

/// A failed host operation, e.g. `create bridge k6t-eth0: File exists (os error 17)`.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The kernel (a syscall, an ioctl or a netlink request) refused.
    #[error("{op} {object}: {source}{}", explained(kernel_message))]
    Os {
        /// What was attempted, e.g. `create bridge`.
        op: &'static str,
        /// What it was attempted on, e.g. a link, netns or sysctl name.
        object: String,
        /// The kernel's answer (carries the errno).
        #[source]
        source: io::Error,
        /// The kernel's own explanation, when netlink gives one (extended ACK).
        kernel_message: Option<String>,
    },
    /// The caller passed something the kernel would reject or misinterpret.
    #[error("{op} {object}: {reason}")]
    Invalid {
        /// What was attempted.
        op: &'static str,
        /// The offending value.
        object: String,
        /// Why it is rejected.
        reason: String,
    },
    /// The kernel answered with something this crate could not decode.
    #[error("{op} {object}: malformed netlink reply: {reason}")]
    Protocol {
        /// What was attempted.
        op: &'static str,
        /// What it was attempted on.
        object: String,
        /// What was wrong with the reply.
        reason: String,
    },
}

impl HostError {
    /// Builds [`HostError::Os`].
    pub fn os(op: &'static str, object: impl Into<String>, source: impl Into<io::Error>) -> Self {
        HostError::Os {
            op,
            object: object.into(),
            source: source.into(),
            kernel_message: None,
        }
    }

    /// Builds [`HostError::Invalid`].
    pub fn invalid(op: &'static str, object: impl Into<String>, reason: impl Into<String>) -> Self {
        HostError::Invalid {
            op,
            object: object.into(),
            reason: reason.into(),
        }
    }

    /// The kernel errno, when the kernel refused.
    pub fn errno(&self) -> Option<i32> {
        match self {
            HostError::Os { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// True when the object does not exist (`ENODEV`, `ENOENT`, `ESRCH`,
    /// `EADDRNOTAVAIL`): what idempotent teardown ignores.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.errno(),
            Some(libc::ENODEV | libc::ENOENT | libc::ESRCH | libc::EADDRNOTAVAIL)
        )
    }

    /// True when the object already exists (`EEXIST`).
    pub fn is_already_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }
}

fn explained(kernel_message: &Option<String>) -> String {
    kernel_message
        .as_ref()
        .map(|message| format!(" ({message})"))
        .unwrap_or_default()
}

/// Result of a host operation.
pub type Result<T, E = HostError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_operation_object_and_errno() {
        let e = HostError::os(
            "create bridge",
            "k6t-eth0",
            io::Error::from_raw_os_error(libc::EEXIST),
        );
        assert_eq!(e.to_string(), "create bridge k6t-eth0: File exists (os error 17)");
        assert!(e.is_already_exists());
        assert!(!e.is_not_found());
    }

    #[test]
    fn the_kernel_explanation_is_appended() {
        let e = HostError::Os {
            op: "add route",
            object: "10.0.0.5/24".into(),
            source: io::Error::from_raw_os_error(libc::EINVAL),
            kernel_message: Some("Invalid prefix for given prefix length".into()),
        };
        assert_eq!(
            e.to_string(),
            "add route 10.0.0.5/24: Invalid argument (os error 22) (Invalid prefix for given prefix length)"
        );
        assert_eq!(e.errno(), Some(libc::EINVAL));
    }

    #[test]
    fn not_found_covers_missing_links_and_files() {
        for errno in [libc::ENODEV, libc::ENOENT] {
            assert!(HostError::os("delete link", "x", io::Error::from_raw_os_error(errno)).is_not_found());
        }
        assert!(!HostError::invalid("create link", "x", "bad").is_not_found());
    }
}
