// Package bytesize reads the byte sizes users write in flags and
// configuration files: a number and an optional unit, binary (KiB, MiB,
// GiB, TiB) or decimal (KB, MB, GB, TB), or B.
package bytesize
