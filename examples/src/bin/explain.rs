//! What the pet store's stack will do, before it runs: each spec's calls
//! and waits, and for each annotated fn the most calls one call sends to
//! the upstream, the longest a caller waits, and what it can get.
//!
//! Run with `cargo run -p examples --bin explain` (`--json` for JSON).

use examples::petstore::PetClient;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The pet store's client: its annotated fns are what is explained.
    let _ = std::mem::size_of::<PetClient>();
    let settings = config::Config::builder()
        .add_source(config::File::from_str(
            include_str!("../../resilient.toml"),
            config::FileFormat::Toml,
        ))
        .build()?;
    let explained = resilient_config::explain(&settings)?;
    if std::env::args().any(|a| a == "--json") {
        println!("{}", serde_json::to_string_pretty(&explained)?);
    } else {
        print!("{explained}");
    }
    Ok(())
}
