//! JVMs on far memory: the collector farmem cannot page. Checked twice:
//! by `farmem run` before the program starts, and by the preloaded shim in
//! the JVM itself (a JVM started without `farmem run`, or by a script).

/// What a JVM is told to use ZGC with: the collector keeps its heap in a
/// memfd it maps several times over (colored pointers), and far pages
/// cannot be mapped twice.
pub const ZGC_REFUSED: &str = "this JVM is set to use ZGC (-XX:+UseZGC), which maps its heap several times through a memfd, and far pages cannot be mapped twice; run it with -XX:+UseParallelGC, -XX:+UseG1GC (the default), -XX:+UseSerialGC or -XX:+UseShenandoahGC";

/// Whether a JVM started with `args` (its command line after the program)
/// and `env_options` (the values of `JAVA_TOOL_OPTIONS`, `JDK_JAVA_OPTIONS`
/// and `_JAVA_OPTIONS`) runs ZGC: the last `-XX:±UseZGC` wins, as in the
/// JVM, and the command line comes after the environment.
pub fn jvm_uses_zgc<'a>(
    args: impl IntoIterator<Item = &'a str>,
    env_options: &'a [String],
) -> bool {
    let mut zgc = false;
    let words = env_options
        .iter()
        .flat_map(|o| o.split_whitespace())
        .chain(args);
    for w in words {
        match w {
            "-XX:+UseZGC" => zgc = true,
            "-XX:-UseZGC" => zgc = false,
            _ => {}
        }
    }
    zgc
}

/// The JVM's option variables that are set, in the order it reads them.
pub fn jvm_env_options() -> Vec<String> {
    ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zgc_is_found_where_the_jvm_reads_it_the_last_word_winning() {
        let none: Vec<String> = Vec::new();
        assert!(jvm_uses_zgc(["-XX:+UseZGC", "-jar", "x.jar"], &none));
        assert!(!jvm_uses_zgc(["-XX:+UseZGC", "-XX:-UseZGC"], &none));
        assert!(!jvm_uses_zgc(["-XX:+UseG1GC"], &none));
        let env = vec!["-Xmx1g -XX:+UseZGC".to_string()];
        assert!(jvm_uses_zgc(["-cp", "."], &env));
        assert!(!jvm_uses_zgc(["-XX:-UseZGC"], &env));
    }
}
