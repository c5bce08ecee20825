// Package re2 checks a regular expression exactly as Envoy's RE2 does,
// before it is emitted: it refuses what RE2 refuses to parse, with RE2's
// own message, and otherwise returns RE2's program size, which Envoy
// compares with MaxProgramSize. Go's regexp is no substitute: it accepts
// regexes Envoy refuses (\x{4e00} in Envoy 1.40) and knows nothing of
// program sizes, and a single regex over the limit makes Envoy refuse the
// whole listener or route configuration that carries it.
//
// It is a port of the parts of RE2 that decide both answers, written in Go
// from RE2's algorithms (re2/parse.cc, simplify.cc, compile.cc, prog.cc):
// the parser with its alternation factoring (ABC|ABD becomes AB[CD]), the
// simplifier (counted repetition written out, a*a+ coalesced), the
// compiler's instruction-by-instruction output (UTF-8 byte sequences with
// RE2's shared suffixes and leading-byte trie; in Latin-1 one byte range
// per class range), the unanchored .*? prefix, and Optimize and Flatten,
// whose flat instruction count is RE2::ProgramSize.
//
// Facts about Envoy's RE2, each measured on official Envoy builds with
// `envoy --mode validate` and a runtime error level of 1 (every regex is
// then refused with its size), and recorded in testdata/envoy_vectors.json:
//
//   - Envoy 1.39.3 and 1.40.0 compile regexes in Latin-1 (dialect
//     Envoy139): \x{ff} is accepted but \x{100} is "invalid escape
//     sequence: \x{100", . costs 6 instructions (12 in UTF-8), (?i)k costs
//     5 (no Kelvin sign), a UTF-8 "é" is two characters, so "é+" repeats
//     only its second byte. Envoy 1.36.2 compiles in UTF-8 (dialect
//     Envoy136), as RE2 does by default; so did 1.37.0 and 1.38.3 in a
//     spot check. Check uses Envoy139; CheckAll passes only what every
//     dialect accepts and reports the largest size.
//   - Otherwise RE2's defaults: Perl syntax (\d, (?i), non-greedy *?, \A,
//     \z, \C, \Q..\E, (?P<n>) and (?<n>)), ^ and $ match only at the ends
//     of the text unless (?m), . excludes \n unless (?s), groups capture.
//     Named groups may repeat a name; look-around, backreferences, \Z, \G,
//     (?P=n) and repeat counts above 1000 (also nested: (a{2}){501}) are
//     refused.
//   - The program size is that of the forward program after RE2 strips a
//     required prefix: ^abc costs 4, as much as the empty regex, but
//     ^(abc) costs 7.
//   - RE2's memory budget is its default 8 MiB: 698,996 instructions
//     before flattening (or twice that many regexp nodes visited), beyond
//     which RE2 fails with "pattern too large - compile failed". Envoy 1.40
//     does not raise it with the error level.
//   - The limit is re2.max_program_size.error_level, 100 by default, and a
//     size equal to it passes. Envoy's RegexMatcher also refuses an empty
//     regex (proto validation) before RE2 sees it; Check does not.
//
// Verified against Envoy 1.40.0 and 1.39.3 (Latin-1) and 1.36.2 (UTF-8):
// the recorded vectors, and the random regexes of test/agreement, which
// `make test` runs against the Envoys it installs. RE2's behaviour here is
// that of its releases from 2024-02 to 2025-11 (Unicode 15.1.0 tables);
// Envoy 1.36's RE2 is older only in reporting (?<=a) as an invalid named
// capture group rather than an invalid perl operator.
package re2
