//! `overbook`: the one binary (the command line lives in the library).

fn main() -> std::process::ExitCode {
    overbook::main()
}
