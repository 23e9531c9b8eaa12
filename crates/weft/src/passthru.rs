//! `passthru`: the head of Multus's auxiliary CNI chain (`auxiliaryCNIChainName`). ADD returns
//! an empty result in the requested version; every other verb does nothing. The chain's
//! plugins that follow it do the work.

use std::process::ExitCode;

use weft_cni::plugin::{Plugin, PluginRequest};
use weft_cni::{CniError, CniResult};

struct Passthru;

/// Run the `passthru` plugin as the current process.
pub fn run() -> ExitCode {
    weft_cni::plugin::run(&Passthru)
}

impl Plugin for Passthru {
    fn add(&self, _request: &PluginRequest) -> Result<CniResult, CniError> {
        Ok(CniResult::default())
    }
    fn del(&self, _request: &PluginRequest) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _request: &PluginRequest) -> Result<(), CniError> {
        Ok(())
    }
}
