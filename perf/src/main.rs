fn main() {
    println!("sluice-perf: scenarios arrive with the performance issue");
}
