fn main() {
    println!("prover {} ({})", prover::VERSION, prover::BUILD_HASH);
}
