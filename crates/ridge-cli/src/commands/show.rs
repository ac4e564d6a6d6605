//! `ridge show MODEL`: what a model holds — architecture, shape, tokenizer, chat template,
//! quantisation — read from its GGUF header, before anyone spends the time to load it.
//!
//! It looks, never fetches: MODEL must be a file, a cached registry model or a model in the
//! Hub cache ([`crate::models::locate`]), so `show` answers at once, offline, and never starts
//! a multi-gigabyte download by way of a typo.

use anyhow::Result;
use ridge_gguf::{ArrayValue, MetadataValue};
use serde_json::{json, Map, Value};

use crate::inspect::{self, human_bytes, human_count};

/// Arguments of `show`.
#[derive(clap::Args)]
pub struct Args {
    /// The model: a registry name, a Hub name (hf.co/OWNER/REPO[:QUANT]) or a GGUF path.
    model: String,
    /// Print only the chat template, in full and exactly as the file holds it.
    #[arg(long, conflicts_with_all = ["json", "metadata"])]
    template: bool,
    /// Also print every metadata key with its value (long arrays abbreviated).
    #[arg(long)]
    metadata: bool,
    /// Print everything as one JSON object, with the full metadata (long arrays as their
    /// length).
    #[arg(long)]
    json: bool,
}

/// Arrays longer than this are given by type and length only (token lists, merges, scores).
const JSON_ARRAY_MAX: usize = 64;
/// Elements of an array the text listing shows before `…`.
const TEXT_ARRAY_SHOWN: usize = 8;
/// Lines of the chat template the summary shows.
const TEMPLATE_LINES: usize = 6;

/// The element type of an array, as GGUF names it.
fn element_type(a: &ArrayValue) -> &'static str {
    match a {
        ArrayValue::U8(_) => "u8",
        ArrayValue::I8(_) => "i8",
        ArrayValue::U16(_) => "u16",
        ArrayValue::I16(_) => "i16",
        ArrayValue::U32(_) => "u32",
        ArrayValue::I32(_) => "i32",
        ArrayValue::F32(_) => "f32",
        ArrayValue::Bool(_) => "bool",
        ArrayValue::String(_) => "string",
        ArrayValue::U64(_) => "u64",
        ArrayValue::I64(_) => "i64",
        ArrayValue::F64(_) => "f64",
        ArrayValue::Array(_) => "array",
    }
}

/// The array's elements as JSON (numbers that JSON cannot hold, NaN and infinities, as null).
fn array_items(a: &ArrayValue) -> Vec<Value> {
    match a {
        ArrayValue::U8(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::I8(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::U16(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::I16(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::U32(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::I32(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::F32(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::Bool(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::String(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::U64(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::I64(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::F64(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValue::Array(v) => v.iter().map(array_json).collect(),
    }
}

fn array_json(a: &ArrayValue) -> Value {
    if a.len() > JSON_ARRAY_MAX {
        json!({ "element_type": element_type(a), "length": a.len() })
    } else {
        Value::Array(array_items(a))
    }
}

/// A metadata value as JSON; an array longer than [`JSON_ARRAY_MAX`] becomes
/// `{"element_type": …, "length": …}`.
fn value_json(v: &MetadataValue) -> Value {
    match v {
        MetadataValue::U8(x) => json!(x),
        MetadataValue::I8(x) => json!(x),
        MetadataValue::U16(x) => json!(x),
        MetadataValue::I16(x) => json!(x),
        MetadataValue::U32(x) => json!(x),
        MetadataValue::I32(x) => json!(x),
        MetadataValue::F32(x) => json!(x),
        MetadataValue::Bool(x) => json!(x),
        MetadataValue::String(x) => json!(x),
        MetadataValue::U64(x) => json!(x),
        MetadataValue::I64(x) => json!(x),
        MetadataValue::F64(x) => json!(x),
        MetadataValue::Array(a) => array_json(a),
    }
}

/// A metadata value on one line: strings quoted and escaped, arrays cut after
/// [`TEXT_ARRAY_SHOWN`] elements with their length.
fn value_text(v: &MetadataValue) -> String {
    let MetadataValue::Array(a) = v else {
        return match value_json(v) {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
    };
    let items = array_items(a);
    let shown: Vec<String> = items
        .iter()
        .take(TEXT_ARRAY_SHOWN)
        .map(|x| match x {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        })
        .collect();
    if items.len() > TEXT_ARRAY_SHOWN {
        format!(
            "[{}, … ({} {} items)]",
            shown.join(", "),
            items.len(),
            element_type(a)
        )
    } else {
        format!("[{}]", shown.join(", "))
    }
}

/// A per-layer count (head counts may be one number or one per layer) as JSON.
fn count_json(m: &inspect::Model, key: &str) -> Value {
    m.head().get(key).map_or(Value::Null, value_json)
}

/// A per-layer count as text: the number, or `min–max per layer`.
fn count_text(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::Array(a) => {
            let ns: Vec<u64> = a.iter().filter_map(Value::as_u64).collect();
            let (lo, hi) = (ns.iter().min()?, ns.iter().max()?);
            Some(if lo == hi {
                format!("{lo} (every layer)")
            } else {
                format!("{lo}–{hi} per layer")
            })
        }
        _ => None,
    }
}

/// Everything `show` reports, as JSON (the text form prints from it too).
fn report(arg: &str, m: &inspect::Model) -> Value {
    let arch = m.arch().unwrap_or_default().to_string();
    let k = |suffix: &str| format!("{arch}.{suffix}");
    let n = m.parameters();
    let size = m.size_bytes();
    let vocab = m
        .head()
        .get("tokenizer.ggml.tokens")
        .and_then(MetadataValue::as_array)
        .map(ArrayValue::len)
        .map(|l| l as u64)
        .or_else(|| m.u64(&k("vocab_size")));
    let types: Vec<Value> = m
        .tensor_types()
        .iter()
        .map(|t| json!({"type": t.ty, "count": t.count, "bytes": t.bytes}))
        .collect();
    let metadata: Map<String, Value> = m
        .head()
        .metadata()
        .iter()
        .map(|(key, v)| (key.clone(), value_json(v)))
        .collect();
    let files: Vec<String> = m.paths().iter().map(|p| p.display().to_string()).collect();
    json!({
        "model": arg,
        "path": files.first(),
        "files": files,
        "size_bytes": size,
        "size": human_bytes(size),
        "architecture": m.arch(),
        "name": m.str("general.name"),
        "parameters": n,
        "params": human_count(n),
        "quant": m.quant(),
        "file_type": m.u64("general.file_type"),
        "weight_type": m.weight_type(),
        "context_length": m.u64(&k("context_length")),
        "embedding_length": m.u64(&k("embedding_length")),
        "layers": m.u64(&k("block_count")),
        "heads": count_json(m, &k("attention.head_count")),
        "kv_heads": count_json(m, &k("attention.head_count_kv")),
        "experts": m.u64(&k("expert_count")),
        "experts_used": m.u64(&k("expert_used_count")),
        "vocab_size": vocab,
        "tokenizer_model": m.str("tokenizer.ggml.model"),
        "chat_template": m.str("tokenizer.chat_template"),
        "tensor_count": m.file.tensors().len(),
        "tensor_types": types,
        "metadata": metadata,
    })
}

/// Runs `show`.
pub fn main(a: Args) -> Result<()> {
    let path = crate::models::locate(&a.model)?;
    let m = inspect::Model::open(&path)?;
    if a.template {
        match m.str("tokenizer.chat_template") {
            Some(t) => print!("{t}"),
            None => anyhow::bail!("{} has no chat template", a.model),
        }
        return Ok(());
    }
    let r = report(&a.model, &m);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let s = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let line = |label: &str, value: String| println!("{label:<18}{value}");
    let files = r["files"].as_array().cloned().unwrap_or_default();
    if files.len() == 1 {
        line("path", s(&files[0]));
    } else {
        line("files", format!("{} shards", files.len()));
        for f in &files {
            line("", s(f));
        }
    }
    line(
        "size",
        format!("{} ({} bytes)", s(&r["size"]), s(&r["size_bytes"])),
    );
    line("architecture", s(&r["architecture"]));
    line("name", s(&r["name"]));
    line(
        "parameters",
        format!("{} ({})", s(&r["params"]), s(&r["parameters"])),
    );
    let mut quant = s(&r["quant"]);
    if !r["weight_type"].is_null() && r["weight_type"] != r["quant"] {
        quant.push_str(&format!(" (weights mostly {})", s(&r["weight_type"])));
    }
    line("quantisation", quant);
    line("context length", s(&r["context_length"]));
    line("embedding length", s(&r["embedding_length"]));
    line("layers", s(&r["layers"]));
    line(
        "heads",
        count_text(&r["heads"]).unwrap_or_else(|| "-".into()),
    );
    line(
        "kv heads",
        count_text(&r["kv_heads"]).unwrap_or_else(|| "-".into()),
    );
    if let Some(e) = r["experts"].as_u64().filter(|&e| e > 0) {
        let used = r["experts_used"]
            .as_u64()
            .map_or(String::new(), |u| format!(" ({u} used per token)"));
        line("experts", format!("{e}{used}"));
    }
    line("vocabulary", s(&r["vocab_size"]));
    line("tokenizer", s(&r["tokenizer_model"]));
    match m.str("tokenizer.chat_template") {
        None => line("chat template", "none".into()),
        Some(t) => {
            let lines: Vec<&str> = t.lines().collect();
            line(
                "chat template",
                format!("{} bytes, {} lines:", t.len(), lines.len()),
            );
            for l in lines.iter().take(TEMPLATE_LINES) {
                println!("    {l}");
            }
            if lines.len() > TEMPLATE_LINES {
                println!("    … (ridge show {} --template prints it all)", a.model);
            }
        }
    }
    println!();
    let mut table = vec![["TYPE", "TENSORS", "BYTES", "SIZE"]
        .map(String::from)
        .to_vec()];
    for t in m.tensor_types() {
        table.push(vec![
            t.ty.clone(),
            t.count.to_string(),
            t.bytes.to_string(),
            human_bytes(t.bytes),
        ]);
    }
    super::list::print_table(&table, &[1, 2, 3]);
    if a.metadata {
        println!();
        let width = m
            .head()
            .metadata()
            .iter()
            .map(|(k, _)| k.len())
            .max()
            .unwrap_or(0);
        for (key, v) in m.head().metadata() {
            println!("{key:<width$}  {}", value_text(v));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_arrays_are_abbreviated() {
        let v = MetadataValue::Array(ArrayValue::String(
            (0..100).map(|i| format!("t{i}")).collect(),
        ));
        assert_eq!(
            value_json(&v),
            json!({"element_type": "string", "length": 100})
        );
        let t = value_text(&v);
        assert!(
            t.starts_with("[\"t0\", \"t1\"") && t.ends_with("… (100 string items)]"),
            "{t}"
        );
        let short = MetadataValue::Array(ArrayValue::I32(vec![1, 2]));
        assert_eq!(value_json(&short), json!([1, 2]));
        assert_eq!(value_text(&short), "[1, 2]");
        assert_eq!(
            value_text(&MetadataValue::String("a\nb".into())),
            "\"a\\nb\""
        );
        assert_eq!(
            count_text(&json!([4, 8, 8])).as_deref(),
            Some("4–8 per layer")
        );
    }
}
