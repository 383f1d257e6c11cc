//! Classifies 8x8 images of digits with the `digits` bundle, through its C API.
//!
//!   classify-digits WEIGHTS IMAGES.f32 COUNT [PROBABILITIES.f32]
//!
//! Same arguments and output as examples/bundle-c/main.c.
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::process::exit;
use std::ptr;

// From digits.h (the bundle's header documents each of these).
#[repr(C)]
struct Digits {
    _opaque: [u8; 0],
}
const DIGITS_OK: i32 = 0;
const IMAGE_VALUES: usize = 64; // "image" float32 [B, 1, 8, 8]
const CLASSES: usize = 10; // "probabilities" float32 [B, 10]

extern "C" {
    fn digits_create(weights_path: *const c_char, out: *mut *mut Digits) -> i32;
    fn digits_destroy(model: *mut Digits);
    fn digits_last_error(model: *const Digits) -> *const c_char;
    fn digits_run(model: *mut Digits, batch: i64, inputs: *const *const c_void, outputs: *const *mut c_void) -> i32;
}

/// Owns the bundle's handle; destroys it when dropped.
struct Model(*mut Digits);

impl Model {
    fn create(weights: &str) -> Result<Model, String> {
        let path = CString::new(weights).map_err(|e| e.to_string())?;
        let mut handle = ptr::null_mut();
        let status = unsafe { digits_create(path.as_ptr(), &mut handle) };
        let model = Model(handle);
        if status != DIGITS_OK {
            return Err(format!("cannot create the model: {}", model.last_error()));
        }
        Ok(model)
    }

    fn last_error(&self) -> String {
        unsafe { CStr::from_ptr(digits_last_error(self.0)) }.to_string_lossy().into_owned()
    }

    fn run(&mut self, images: &[f32]) -> Result<Vec<f32>, String> {
        let batch = images.len() / IMAGE_VALUES;
        let mut probabilities = vec![0f32; batch * CLASSES];
        let inputs = [images.as_ptr() as *const c_void];
        let outputs = [probabilities.as_mut_ptr() as *mut c_void];
        let status = unsafe { digits_run(self.0, batch as i64, inputs.as_ptr(), outputs.as_ptr()) };
        if status != DIGITS_OK {
            return Err(format!("run failed: {}", self.last_error()));
        }
        Ok(probabilities)
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { digits_destroy(self.0) }
    }
}

fn fail(what: String) -> ! {
    eprintln!("error: {}", what);
    exit(1)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: {} WEIGHTS IMAGES.f32 COUNT [PROBABILITIES.f32]", args[0]);
        exit(2);
    }
    let count: usize = args[3].parse().unwrap_or_else(|_| fail("COUNT must be a positive number".into()));
    let bytes = std::fs::read(&args[2]).unwrap_or_else(|e| fail(format!("cannot read the images: {}", e)));
    if count == 0 || bytes.len() < count * IMAGE_VALUES * 4 {
        fail("the images file holds fewer than COUNT images".into());
    }
    let images: Vec<f32> = bytes[..count * IMAGE_VALUES * 4]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();

    let mut model = Model::create(&args[1]).unwrap_or_else(|e| fail(e));
    let probabilities = model.run(&images).unwrap_or_else(|e| fail(e));
    for row in probabilities.chunks_exact(CLASSES) {
        let best = (0..CLASSES).fold(0, |best, d| if row[d] > row[best] { d } else { best });
        println!("{}", best);
    }
    if args.len() > 4 {
        let out: Vec<u8> = probabilities.iter().flat_map(|p| p.to_le_bytes()).collect();
        std::fs::write(&args[4], out).unwrap_or_else(|e| fail(format!("cannot write the probabilities: {}", e)));
    }
}
