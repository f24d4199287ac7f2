//! `respgw-replay-upstream`: the replay upstream of `respgw-testkit` as a standalone process, for
//! benchmarks and integrated runs against a separately started gateway.
//!
//! ```text
//! respgw-replay-upstream [--port N] [--scenario NAME=a.yaml,b.yaml]... [--synthetic-text NAME]...
//! ```
//!
//! * `--port N`: listen on `127.0.0.1:N` (default 0: pick a free port).
//! * `--scenario NAME=...`: requests with `model == NAME` replay these cassettes in order (paths
//!   relative to `tests/fixtures/cassettes/`).
//! * `--synthetic-text NAME`: requests with `model == NAME` get a short synthetic text stream, forever.
//!
//! Prints exactly one line `listening on http://127.0.0.1:PORT` on stdout when ready, then serves
//! until interrupted. Requests are not recorded (nobody could read them).

use anyhow::{Context, bail};
use respgw_testkit::{Cassette, ReplayUpstream, Step, cassettes_dir};

const USAGE: &str =
    "usage: respgw-replay-upstream [--port N] [--scenario NAME=a.yaml,b.yaml]... [--synthetic-text NAME]...";

/// The reply of `--synthetic-text` scenarios.
fn synthetic_text_step() -> Step {
    Step::text(&["Hello", " from", " the", " replay", " upstream", "."], "stop", Some((12, 6)))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut port = 0;
    let mut scenarios: Vec<(String, Vec<Step>)> = Vec::new();
    let mut synthetic_models: Vec<String> = Vec::new();

    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--port" => port = value()?.parse().context("--port must be a number")?,
            "--scenario" => {
                let spec = value()?;
                let Some((name, files)) = spec.split_once('=') else {
                    bail!("--scenario expects NAME=a.yaml,b.yaml, got `{spec}`");
                };
                let mut steps = Vec::new();
                for file in files.split(',') {
                    // Fail at startup, not on the first request, if a cassette is unreadable.
                    Cassette::load(cassettes_dir().join(file))?;
                    steps.push(Step::cassette(file));
                }
                scenarios.push((name.to_owned(), steps));
            }
            "--synthetic-text" => synthetic_models.push(value()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }

    let upstream = ReplayUpstream::start_on(port).await?;
    upstream.set_recording(false);
    for (name, steps) in scenarios {
        upstream.add_scenario(name, steps);
    }
    for name in synthetic_models {
        upstream.add_repeating_scenario(name, synthetic_text_step());
    }
    println!("listening on http://127.0.0.1:{}", upstream.port());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
