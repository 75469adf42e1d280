//! `peregrine report DIR`: renders a results folder again from its `results.json`.

use crate::flags::ReportArgs;
use anyhow::Result;

pub fn run(r: ReportArgs) -> Result<()> {
    let rendered = peregrine_report::render(&r.dir)?;
    print!("{}", rendered.text);
    println!();
    println!("report: {}", rendered.html_path.display());
    Ok(())
}
