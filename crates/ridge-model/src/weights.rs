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
    /// Index of this matrix's tiled copy in [`crate::Model`]'s packed matrices, if it has one.
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

    /// Total bytes of the matrix.
    pub fn bytes(&self) -> usize {
        self.len
    }
}

fn dtype_of(t: GgmlType) -> Option<DType> {
    Some(match t {
        GgmlType::F32 => DType::F32,
        GgmlType::F16 => DType::F16,
        GgmlType::BF16 => DType::BF16,
        GgmlType::Q8_0 => DType::Q8_0,
        GgmlType::Q4_0 => DType::Q4_0,
        GgmlType::Q4_1 => DType::Q4_1,
        GgmlType::Q5_0 => DType::Q5_0,
        GgmlType::Q4_K => DType::Q4_K,
        GgmlType::Q5_K => DType::Q5_K,
        GgmlType::Q6_K => DType::Q6_K,
        _ => return None,
    })
}

fn shape_err(f: &GgufFile, name: &str, message: String) -> ModelError {
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
    let t = f.tensor(name)?;
    let dtype = dtype_of(t.ty).ok_or_else(|| {
        shape_err(
            f,
            name,
            format!(
                "weight type {} is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1)",
                t.ty
            ),
        )
    })?;
    if t.dims != [cols as u64, rows as u64] {
        return Err(shape_err(
            f,
            name,
            format!("shape {:?}, expected [{cols}, {rows}]", t.dims),
        ));
    }
    Ok(MatRef {
        dtype,
        rows,
        cols,
        offset: t.offset,
        len: t.size,
        tiles: None,
    })
}

/// Reads a 1-D vector of `n` elements (norm weights) into f32; these are a few KB per layer.
pub(crate) fn vector(f: &GgufFile, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
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
    if t.dims != [n as u64] {
        return Err(shape_err(
            f,
            name,
            format!("shape {:?}, expected [{n}]", t.dims),
        ));
    }
    let mut out = vec![0f32; n];
    blocks::dequantize_row(dtype, f.tensor_data(t), &mut out);
    Ok(out)
}
