//! Binding GGUF tensors to the matrices a forward pass needs: type and shape checked once at
//! load, then kept as offsets into the memory map.

use crate::ModelError;
use ridge_gguf::{GgmlType, GgufFile};
use ridge_kernels::{blocks, DType, WeightMatrix};

/// A weight matrix as a byte range of the mapped file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatRef {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    pub offset: usize,
    pub len: usize,
    /// Index of this matrix's tiled copy in the model's packed matrices (`LayerCtx::tiles`),
    /// if it has one.
    pub tiles: Option<usize>,
}

impl MatRef {
    /// The matrix over the file's bytes (the range was validated by the reader).
    #[inline]
    pub fn view<'a>(&self, bytes: &'a [u8]) -> WeightMatrix<'a> {
        WeightMatrix {
            dtype: self.dtype,
            rows: self.rows,
            cols: self.cols,
            data: &bytes[self.offset..self.offset + self.len],
            layout: ridge_kernels::Layout::Rows,
        }
    }
}

/// The file types ridge computes in, and the kernel format of each (the one list both the
/// lookup and the "not supported" message read, so they cannot disagree).
const FORMATS: [(GgmlType, DType); 25] = [
    (GgmlType::F32, DType::F32),
    (GgmlType::F16, DType::F16),
    (GgmlType::BF16, DType::BF16),
    (GgmlType::Q8_0, DType::Q8_0),
    (GgmlType::Q4_0, DType::Q4_0),
    (GgmlType::Q4_1, DType::Q4_1),
    (GgmlType::Q5_0, DType::Q5_0),
    (GgmlType::Q5_1, DType::Q5_1),
    (GgmlType::Q4_K, DType::Q4_K),
    (GgmlType::Q5_K, DType::Q5_K),
    (GgmlType::Q6_K, DType::Q6_K),
    (GgmlType::MXFP4, DType::MXFP4),
    (GgmlType::Q2_K, DType::Q2_K),
    (GgmlType::Q3_K, DType::Q3_K),
    (GgmlType::IQ4_NL, DType::IQ4_NL),
    (GgmlType::IQ4_XS, DType::IQ4_XS),
    (GgmlType::IQ2_XXS, DType::IQ2_XXS),
    (GgmlType::IQ2_XS, DType::IQ2_XS),
    (GgmlType::IQ2_S, DType::IQ2_S),
    (GgmlType::IQ3_XXS, DType::IQ3_XXS),
    (GgmlType::IQ3_S, DType::IQ3_S),
    (GgmlType::IQ1_S, DType::IQ1_S),
    (GgmlType::IQ1_M, DType::IQ1_M),
    (GgmlType::TQ1_0, DType::TQ1_0),
    (GgmlType::TQ2_0, DType::TQ2_0),
];

fn dtype_of(t: GgmlType) -> Option<DType> {
    FORMATS.iter().find(|(g, _)| *g == t).map(|&(_, d)| d)
}

/// "F32, F16, …": the supported file types, for error messages.
fn supported_list() -> String {
    let names: Vec<String> = FORMATS.iter().map(|(g, _)| g.to_string()).collect();
    names.join(", ")
}

pub(crate) fn shape_err(f: &GgufFile, name: &str, message: String) -> ModelError {
    ModelError::Gguf(ridge_gguf::GgufError::Tensor {
        path: f.path().to_path_buf(),
        name: name.to_string(),
        message,
    })
}

/// Binds a 2-D matrix of `rows` outputs by `cols` inputs (GGUF dims `[cols, rows]`).
pub(crate) fn matrix(
    f: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<MatRef, ModelError> {
    bind(f, name, &[cols as u64, rows as u64], String::new(), rows)
}

/// Binds a fused matrix (GGUF dims `[cols, Σ parts]`) as consecutive row ranges of `parts[i]`
/// rows each: Phi-3's `attn_qkv` as Q, K and V, its `ffn_up` as gate and up. A quantized row
/// is whole blocks, so each part is a matrix of its own over the same bytes.
pub(crate) fn matrix_parts<const N: usize>(
    f: &GgufFile,
    name: &str,
    parts: [usize; N],
    cols: usize,
) -> Result<[MatRef; N], ModelError> {
    let rows: usize = parts.iter().sum();
    let what = format!(" (parts of {parts:?} rows)");
    let whole = bind(f, name, &[cols as u64, rows as u64], what, rows)?;
    let row_bytes = whole.dtype.row_bytes(cols);
    let mut first = 0;
    Ok(parts.map(|r| {
        let m = MatRef {
            rows: r,
            offset: whole.offset + first * row_bytes,
            len: r * row_bytes,
            ..whole
        };
        first += r;
        m
    }))
}

/// Binds a mixture's stacked expert tensor: `n_expert` matrices of `rows` outputs by `cols`
/// inputs (GGUF dims `[cols, rows, n_expert]`), as one matrix of `n_expert · rows` rows in
/// which expert `e` holds rows `e · rows .. (e + 1) · rows`.
pub(crate) fn experts(
    f: &GgufFile,
    name: &str,
    n_expert: usize,
    rows: usize,
    cols: usize,
) -> Result<MatRef, ModelError> {
    let dims = [cols as u64, rows as u64, n_expert as u64];
    let what = format!(" ({n_expert} experts of {rows} × {cols})");
    bind(f, name, &dims, what, n_expert * rows)
}

/// Binds tensor `name` of GGUF dims `dims` (`dims[0]` elements per row) as a matrix of
/// `rows` rows in a computed format; `what` follows the expected shape in the error.
fn bind(
    f: &GgufFile,
    name: &str,
    dims: &[u64],
    what: String,
    rows: usize,
) -> Result<MatRef, ModelError> {
    let t = f.tensor(name)?;
    let dtype = dtype_of(t.ty).ok_or_else(|| {
        shape_err(
            f,
            name,
            format!(
                "weight type {} is not supported ({})",
                t.ty,
                supported_list()
            ),
        )
    })?;
    if t.dims != dims {
        return Err(shape_err(
            f,
            name,
            format!("shape {:?}, expected {dims:?}{what}", t.dims),
        ));
    }
    Ok(MatRef {
        dtype,
        rows,
        cols: dims[0] as usize,
        offset: t.offset,
        len: t.size,
        tiles: None,
    })
}

/// Reads a 1-D vector of `n` elements (norm weights) into f32; these are a few KB per layer.
pub(crate) fn vector(f: &GgufFile, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
    float_tensor(f, name, &[n as u64])
}

/// Binds a float tensor of `n` rows of `len` values (GGUF dims `[len, n]`, e.g. a stacked
/// experts' bias) into f32, row after row.
pub(crate) fn f32_rows(
    f: &GgufFile,
    name: &str,
    len: usize,
    n: usize,
) -> Result<Vec<f32>, ModelError> {
    float_tensor(f, name, &[len as u64, n as u64])
}

/// A float (F32, F16, BF16) tensor of exactly `dims`, into f32.
fn float_tensor(f: &GgufFile, name: &str, dims: &[u64]) -> Result<Vec<f32>, ModelError> {
    let t = f.tensor(name)?;
    let dtype = dtype_of(t.ty)
        .filter(|d| !d.is_quantized())
        .ok_or_else(|| {
            shape_err(
                f,
                name,
                format!("type {} (expected F32, F16 or BF16)", t.ty),
            )
        })?;
    if t.dims != dims {
        return Err(shape_err(
            f,
            name,
            format!("shape {:?}, expected {dims:?}", t.dims),
        ));
    }
    let mut out = vec![0f32; dims.iter().product::<u64>() as usize];
    blocks::dequantize_row(dtype, f.tensor_data(t), &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ridge_gguf::GgufWriter;

    #[test]
    fn an_unsupported_weight_type_is_named_with_every_supported_one() {
        // NVFP4: 64 elements in 36 bytes; one row of 256.
        let mut w = GgufWriter::new();
        w.tensor("m", &[256, 1], GgmlType::NVFP4, vec![0u8; 4 * 36]);
        let f = GgufFile::from_bytes("<memory>", w.to_bytes()).expect("valid file");
        let e = matrix(&f, "m", 1, 256)
            .expect_err("NVFP4 is not computed")
            .to_string();
        assert!(e.contains("weight type NVFP4 is not supported"), "{e}");
        for (g, _) in FORMATS {
            assert!(e.contains(&g.to_string()), "{e} lacks {g}");
        }
        // And every listed type binds.
        let mut w = GgufWriter::new();
        w.tensor("m", &[32, 1], GgmlType::Q5_0, vec![0u8; 22]);
        let f = GgufFile::from_bytes("<memory>", w.to_bytes()).expect("valid file");
        assert_eq!(
            matrix(&f, "m", 1, 32).expect("Q5_0 binds").dtype,
            DType::Q5_0
        );
    }
}
