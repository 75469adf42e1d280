//! `peregrine client`: placeholder while the distributor is built.
use crate::flags::md::ClientArgs;
pub fn run(_a: ClientArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
