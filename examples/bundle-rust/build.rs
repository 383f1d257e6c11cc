// Links the `digits` bundle that `kiln aot-freeze` wrote into $KILN_BUNDLE_DIR:
//   kiln aot-freeze ../digits/digits.onnx -o bundle --name digits --batch-sizes 1,4
//   KILN_BUNDLE_DIR=$PWD/bundle cargo build --release
use std::env;
use std::path::Path;

fn main() {
    let dir = env::var("KILN_BUNDLE_DIR").expect("set KILN_BUNDLE_DIR to the directory holding digits.o");
    let object = Path::new(&dir).join("digits.o");
    if !object.exists() {
        panic!("{} does not exist: run kiln aot-freeze first", object.display());
    }
    println!("cargo:rerun-if-env-changed=KILN_BUNDLE_DIR");
    println!("cargo:rerun-if-changed={}", object.display());
    println!("cargo:rustc-link-arg={}", object.display());
    // The kernels call expf, erff, tanhf...
    println!("cargo:rustc-link-lib=m");
}
