// badinput_test.go owns the rejected-write table: each case's last
// command must fail with the errno's text on stderr (bash's builtin echo
// reports the write's error), the full message must be readable (the
// batch's error file, or the daemon log for writes that belong to no
// batch: the mount's /error file, the daemon's choice where the contract
// is silent; both also go to the daemon log), and nothing may change: the same ls of memory, segments and
// batches, the same tasks and the same status afterwards.

package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// errno texts as strerror(3) prints them (LC_ALL=C).
const (
	eINVAL     = "Invalid argument"
	eNOENT     = "No such file or directory"
	eRANGE     = "Numerical result out of range"
	eACCES     = "Permission denied"
	eBUSY      = "Device or resource busy"
	eFBIG      = "File too large"
	eEXIST     = "File exists"
	eOPNOTSUPP = "Operation not supported"
	eAGAIN     = "Resource temporarily unavailable"
)

// badCase is one rejected write. Its script runs with R (a 1 MiB region),
// RW, RO and WO (segments of a 1 MiB file opened read_write, read and
// write), F (that file's path) and N (a fresh open batch) set.
type badCase struct {
	name   string
	setup  string // run before the "before" snapshot
	script string
	errno  string // text expected on stderr
	// phrase is expected in the message: the batch's error file when
	// batchErr, else the mount-wide /error file; the daemon log too.
	phrase   string
	batchErr bool
}

func submitCase(name, doc, errno, phrase string) badCase {
	return badCase{name: "submit/" + name, script: `echo ` + shq(doc) + ` > "$M/ctl/batches/$N/submit"`,
		errno: errno, phrase: phrase, batchErr: true}
}

func registerCase(name, doc, errno, phrase string) badCase {
	return badCase{name: "register/" + name, script: `echo ` + shq(doc) + ` > "$M/memory/register"`, errno: errno, phrase: phrase}
}

func openCase(name, doc, errno, phrase string) badCase {
	return badCase{name: "open/" + name, script: `echo ` + shq(doc) + ` > "$M/segments/open"`, errno: errno, phrase: phrase}
}

func ctlCase(name, cmd, errno, phrase string) badCase {
	return badCase{name: "ctl/" + name, script: `echo ` + shq(cmd) + ` > "$M/ctl/batches/$N/ctl"`, errno: errno, phrase: phrase, batchErr: true}
}

// req renders one scalar request on the fixture's region R; the
// placeholders are expanded by bash.
func req(off, toff, n any) string {
	return fmt.Sprintf(`{"memory":"'"$R"'","offset":%v,"target_offset":%v,"length":%v}`, off, toff, n)
}

// doc renders a submission against target tgt (a shell variable name)
// with the given requests.
func doc(op, tgt string, reqs ...string) string {
	return fmt.Sprintf(`{"op":"%s","target":"'"$%s"'","requests":[%s]}`, op, tgt, strings.Join(reqs, ","))
}

// submitRaw makes a submit case from JSON text in which doc and req's
// '"$X"' splices expand the fixture's variables.
func submitRaw(name, json, errno, phrase string) badCase {
	return badCase{name: "submit/" + name, script: `echo '` + json + `' > "$M/ctl/batches/$N/submit"`,
		errno: errno, phrase: phrase, batchErr: true}
}

var badCases = []badCase{
	// register
	registerCase("invalid_json", `{"name" "x","location":"cpu","bytes":4096}`, eINVAL, "invalid JSON"),
	registerCase("not_an_object", `hello`, eINVAL, "JSON object"),
	registerCase("unknown_field", `{"name":"bad1","location":"cpu","bytes":4096,"colour":"red"}`, eINVAL, `unknown field "colour"`),
	registerCase("zero_bytes", `{"name":"bad2","location":"cpu","bytes":0}`, eINVAL, "bytes"),
	registerCase("bad_size_string", `{"name":"bad3","location":"cpu","bytes":"12 parsecs"}`, eINVAL, "parsecs"),
	registerCase("negative_bytes", `{"name":"bad4","location":"cpu","bytes":-1}`, eINVAL, "-1"),
	registerCase("bad_location", `{"name":"bad5","location":"tpu","bytes":4096}`, eINVAL, "tpu"),
	registerCase("missing_name", `{"location":"cpu","bytes":4096}`, eINVAL, "name"),
	registerCase("slash_in_name", `{"name":"a/b","location":"cpu","bytes":4096}`, eINVAL, "contains '/'"),
	registerCase("dotdot_name", `{"name":"..","location":"cpu","bytes":4096}`, eINVAL, `".."`),
	registerCase("reserved_name", `{"name":"register","location":"cpu","bytes":4096}`, eINVAL, "reserved"),
	{name: "register/duplicate", script: `echo '{"name":"'"$R"'","location":"cpu","bytes":4096}' > "$M/memory/register"`, errno: eEXIST, phrase: "already exists"},
	registerCase("duplicate_key", `{"name":"bad9","name":"bad10","location":"cpu","bytes":4096}`, eINVAL, `duplicate key "name"`),
	registerCase("key_differing_in_case", `{"name":"bad9","location":"cpu","Bytes":4096}`, eINVAL, `unknown field "Bytes"`),
	registerCase("c1_control_in_name", `{"name":"a\u0085b","location":"cpu","bytes":4096}`, eINVAL, "U+0085"),
	registerCase("line_separator_in_name", `{"name":"a\u2028b","location":"cpu","bytes":4096}`, eINVAL, "U+2028"),
	{name: "register/invalid_utf8_in_name", script: `printf '{"name":"a\xffb","location":"cpu","bytes":4096}\n' > "$M/memory/register"`, errno: eINVAL, phrase: "invalid UTF-8"},
	// CI machines have no GPU: the binary with every backend built in
	// says why it cannot serve GPU memory.
	registerCase("cuda_without_gpu", `{"name":"bad6","location":"cuda:0","bytes":4096}`, eOPNOTSUPP, "cannot load libcuda.so.1"),
	registerCase("pinned_without_gpu", `{"name":"bad6p","location":"pinned","bytes":4096}`, eOPNOTSUPP, "cannot load libcuda.so.1"),
	registerCase("trailing_data", `{"name":"bad7","location":"cpu","bytes":4096} {"name":"bad8","location":"cpu","bytes":4096}`, eINVAL, "trailing data"),

	// segments/open (the allowed-roots cases are in the contract's AllowedRoots)
	openCase("invalid_json", `{"name":"bad1","uri":}`, eINVAL, "invalid JSON"),
	openCase("unknown_field", `{"name":"bad1","uri":"file:///tmp/x","permission":"read","mode":1}`, eINVAL, `unknown field "mode"`),
	{name: "open/duplicate_key", script: `echo '{"name":"bad1","uri":"file://'"$F"'","permission":"read","permission":"read_write"}' > "$M/segments/open"`, errno: eINVAL, phrase: `duplicate key "permission"`},
	{name: "open/c1_control_in_name", script: `echo '{"name":"a\u009fb","uri":"file://'"$F"'","permission":"read"}' > "$M/segments/open"`, errno: eINVAL, phrase: "U+009F"},
	{name: "open/bad_permission", script: `echo '{"name":"bad1","uri":"file://'"$F"'","permission":"rw"}' > "$M/segments/open"`, errno: eINVAL, phrase: `"rw"`},
	{name: "open/missing_file", script: `echo '{"name":"bad1","uri":"file://'"$F"'.missing","permission":"read"}' > "$M/segments/open"`, errno: eNOENT, phrase: ".missing"},
	openCase("etc_passwd", `{"name":"bad1","uri":"file:///etc/passwd","permission":"read"}`, eACCES, "/etc/passwd"),
	openCase("not_a_file_uri", `{"name":"bad1","uri":"/tmp/x","permission":"read"}`, eINVAL, "file://"),
	{name: "open/duplicate", script: `echo '{"name":"'"$RW"'","uri":"file://'"$F"'","permission":"read"}' > "$M/segments/open"`, errno: eEXIST, phrase: "already exists"},

	// submit: shape
	submitRaw("invalid_json", `{"op":"read","target":"x",}`, eINVAL, "invalid JSON"),
	submitRaw("not_an_object", `[1,2,3]`, eINVAL, "JSON object"),
	submitRaw("unknown_field", `{"op":"read","target":"'"$RO"'","bogus":1,"requests":[`+req(0, 0, 4)+`]}`, eINVAL, `unknown field "bogus"`),
	submitRaw("unknown_request_field", `{"op":"read","target":"'"$RO"'","requests":[{"memory":"'"$R"'","offset":0,"target_offset":0,"length":4,"colour":1}]}`, eINVAL, `unknown field "colour"`),
	submitRaw("unknown_element_field", `{"op":"read","target":"'"$RO"'","requests":[{"target_offset":0,"elements":[{"padding":4,"extra":1}]}]}`, eINVAL, `unknown field "extra"`),
	// json v1 matched "OP" to op and let the last one win: this ran as a write.
	submitRaw("key_differing_in_case", `{"op":"read","OP":"write","target":"'"$RW"'","requests":[`+req(0, 0, 4)+`]}`, eINVAL, `unknown field "OP"`),
	submitRaw("duplicate_key", `{"op":"read","op":"write","target":"'"$RW"'","requests":[`+req(0, 0, 4)+`]}`, eINVAL, `duplicate key "op"`),
	submitRaw("duplicate_request_key", `{"op":"read","target":"'"$RO"'","requests":[{"memory":"'"$R"'","offset":0,"offset":8,"target_offset":0,"length":4}]}`, eINVAL, `duplicate key "offset" in /requests/0`),
	submitRaw("bad_op", `{"op":"frob","target":"'"$RO"'","requests":[`+req(0, 0, 4)+`]}`, eINVAL, `"frob"`),
	submitRaw("missing_op", `{"target":"'"$RO"'","requests":[`+req(0, 0, 4)+`]}`, eINVAL, "op is missing"),
	submitRaw("no_requests", `{"op":"read","target":"'"$RO"'","requests":[]}`, eINVAL, "requests is empty"),
	submitRaw("zero_length", doc("read", "RO", req(0, 0, 0)), eINVAL, "length is 0"),
	submitRaw("negative_offset", doc("read", "RO", req(-1, 0, 4)), eINVAL, "-1"),
	submitRaw("length_not_a_size", doc("read", "RO", req(0, 0, `"lots"`)), eINVAL, "lots"),
	submitRaw("memory_and_address", `{"op":"read","target":"'"$RO"'","requests":[{"memory":"'"$R"'","address":4096,"target_offset":0,"length":4}]}`, eINVAL, "not both"),
	submitRaw("bad_transport", `{"op":"read","target":"'"$RO"'","requests":[{"memory":"'"$R"'","offset":0,"target_offset":0,"length":4,"transport":"rdma"}]}`, eINVAL, `"rdma"`),
	submitRaw("zero_padding", `{"op":"read","target":"'"$RO"'","requests":[{"target_offset":0,"elements":[{"padding":0}]}]}`, eINVAL, "padding is 0"),
	submitRaw("trailing_data", doc("read", "RO", req(0, 0, 4))+` `+doc("read", "RO", req(0, 0, 4)), eINVAL, "trailing data"),
	submitRaw("timeout_not_a_duration", `{"op":"read","target":"'"$RO"'","timeout":"soon","requests":[`+req(0, 0, 4)+`]}`, eINVAL, "soon"),

	// submit: names
	submitRaw("unknown_segment", `{"op":"read","target":"nosuchseg","requests":[`+req(0, 0, 4)+`]}`, eNOENT, "nosuchseg"),
	submitRaw("unknown_memory", `{"op":"read","target":"'"$RO"'","requests":[{"memory":"nosuchmem","offset":0,"target_offset":0,"length":4}]}`, eNOENT, "nosuchmem"),
	submitRaw("unregistered_address", `{"op":"read","target":"'"$RO"'","requests":[{"address":4096,"target_offset":0,"length":4}]}`, eNOENT, "0x1000"),
	{name: "submit/unknown_batch", script: `echo '` + doc("read", "RO", req(0, 0, 4)) + `' > "$M/ctl/batches/987654321/submit"`, errno: eNOENT},

	// submit: ranges
	submitRaw("target_beyond_eof", doc("read", "RO", req(0, 1048574, 4)), eRANGE, "beyond file size"),
	submitRaw("target_offset_past_eof", doc("read", "RO", req(0, 2097152, 1)), eRANGE, "beyond file size"),
	submitRaw("write_beyond_eof", doc("write", "RW", req(0, 1048575, 2)), eRANGE, "beyond file size"),
	submitRaw("memory_beyond_region", doc("read", "RO", req(1048574, 0, 4)), eRANGE, "requests[0]"),
	submitRaw("memory_offset_past_region", doc("read", "RO", req(2097152, 0, 4)), eRANGE, "requests[0]"),
	submitRaw("second_request_out_of_range", doc("read", "RO", req(0, 0, 4), req(0, 1048575, 4)), eRANGE, "requests[1]"),
	submitRaw("offset_overflow", doc("read", "RO", req(0, "18446744073709551615", 2)), eINVAL, "overflow"),
	submitRaw("vector_beyond_eof", `{"op":"read","target":"'"$RO"'","requests":[{"target_offset":1048000,"elements":[{"memory":"'"$R"'","offset":0,"length":512},{"padding":512}]}]}`, eRANGE, "beyond file size"),

	// submit: permission
	submitRaw("write_on_read_only", doc("write", "RO", req(0, 0, 4)), eACCES, "write"),
	submitRaw("read_on_write_only", doc("read", "WO", req(0, 0, 4)), eACCES, "read"),

	// submit: limits
	submitRaw("transport_gds_unavailable", `{"op":"read","target":"'"$RO"'","requests":[{"memory":"'"$R"'","offset":0,"target_offset":0,"length":4,"transport":"gds"}]}`, eOPNOTSUPP, "gds"),
	submitRaw("vector_over_max_transfer", `{"op":"read","target":"'"$RO"'","requests":[{"target_offset":0,"elements":[{"memory":"'"$R"'","offset":0,"length":4},{"padding":"1GiB"}]}]}`, eFBIG, "max_transfer_bytes"),
	{name: "submit/vector_over_1024_elements", script: `jq -nc --arg r "$R" --arg s "$RO" '{op:"read",target:$s,requests:[{target_offset:0,elements:[range(1025)|{memory:$r,offset:0,length:1}]}]}' > "$T/v.json"
echo "$(cat "$T/v.json")" > "$M/ctl/batches/$N/submit"`, errno: eFBIG, phrase: "max_vector_elements", batchErr: true},
	{name: "submit/over_capacity", script: `jq -nc --arg r "$R" --arg s "$RO" '{op:"read",target:$s,requests:[range(1025)|{memory:$r,offset:.,target_offset:.,length:1}]}' > "$T/c.json"
echo "$(cat "$T/c.json")" > "$M/ctl/batches/$N/submit"`, errno: eAGAIN, phrase: "1025", batchErr: true},
	{name: "submit/document_over_1MiB", script: `{ printf '{"op":"read","target":"%s","requests":[%s]' "$RO" '` + req(0, 0, 4) + `'; head -c 1100000 /dev/zero | tr '\0' ' '; echo '}'; } > "$T/big.json"
cat "$T/big.json" > "$M/ctl/batches/$N/submit"`, errno: eFBIG, phrase: "max_document_bytes", batchErr: true},
	{name: "submit/document_over_1MiB_builtin_echo", script: `{ printf '{"op":"read","target":"%s","requests":[%s]' "$RO" '` + req(0, 0, 4) + `'; head -c 1100000 /dev/zero | tr '\0' ' '; echo '}'; } > "$T/big.json"
echo "$(cat "$T/big.json")" > "$M/ctl/batches/$N/submit"`, errno: eFBIG, phrase: "max_document_bytes", batchErr: true},

	// submit: batch state
	{name: "submit/after_seal", setup: `echo seal > "$M/ctl/batches/$N/ctl"`, script: `echo '` + doc("read", "RO", req(0, 0, 4)) + `' > "$M/ctl/batches/$N/submit"`, errno: eINVAL, phrase: "sealed", batchErr: true},

	// ctl
	ctlCase("unknown_command", "frobnicate", eINVAL, "frobnicate"),
	ctlCase("empty", "", eINVAL, "empty ctl command"),
	ctlCase("seal_with_argument", "seal now", eINVAL, "seal now"),
	ctlCase("cancel_without_index", "cancel", eINVAL, "cancel I"),
	ctlCase("cancel_not_a_number", "cancel x", eINVAL, `"x"`),
	ctlCase("cancel_unknown_task", "cancel 99", eNOENT, "task 99"),
	{name: "ctl/unknown_batch", script: `echo seal > "$M/ctl/batches/987654321/ctl"`, errno: eNOENT},

	// reads that fail
	{name: "wait/before_seal", script: `cat "$M/ctl/batches/$N/wait"`, errno: eINVAL, phrase: "seal", batchErr: true},
	{name: "tasks/unknown_task", script: `cat "$M/ctl/batches/$N/tasks/5"`, errno: eNOENT},
	{name: "status/unknown_batch", script: `cat "$M/ctl/batches/987654321/status"`, errno: eNOENT},
	{name: "rmdir/unknown_memory", script: `rmdir "$M/memory/nosuchmem"`, errno: eNOENT},
	{name: "rmdir/unknown_segment", script: `rmdir "$M/segments/nosuchseg"`, errno: eNOENT},
}

// testBadInput runs badCases against a shared fixture.
func testBadInput(t *testing.T, m *mount) {
	T, _ := m.scratchDirs(t)
	F := T + "/file"
	m.ok(t, `head -c 1M /dev/urandom > "$T/file"`)
	R := m.register(t, "bad", "1MiB")
	RW := m.openSegment(t, "badrw", F, "read_write")
	RO := m.openSegment(t, "badro", F, "read")
	WO := m.openSegment(t, "badwo", F, "write")
	env := fmt.Sprintf("R=%s RW=%s RO=%s WO=%s F=%s", R, RW, RO, WO, F)
	// snapshot prints everything a rejected write must leave alone.
	const snapshot = `ls "$M/memory"; echo --; ls "$M/segments"; echo --; ls "$M/ctl/batches"; echo --
ls "$M/ctl/batches/$N/tasks"; echo --; cat "$M/ctl/batches/$N/state"; cat "$M/ctl/batches/$N/status"; echo
for s in "$RW" "$RO" "$WO"; do cat "$M/segments/$s/info"; echo; done; cat "$M/memory/$R/info"; echo`
	// stable drops status fields that may change with no change to the
	// batch (none are expected; listed here if the daemon adds some).
	stable := func(s string) string { return s }

	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			n := m.clone(t)
			pre := env + " N=" + n + "\n"
			if c.setup != "" {
				m.ok(t, pre+c.setup)
			}
			before := stable(m.ok(t, pre+snapshot))
			logBefore := len(m.logText())
			r := m.run(t, pre+c.script)
			if r.code == 0 {
				t.Errorf("exit 0, want a failure with %q\n%s", c.errno, r)
			} else if !strings.Contains(r.stderr, c.errno) {
				t.Errorf("stderr %q lacks %q", r.stderr, c.errno)
			}
			if r.took > 5*time.Second {
				t.Errorf("the rejected write took %s", r.took)
			}
			if after := stable(m.ok(t, pre+snapshot)); after != before {
				t.Errorf("the rejected write changed the mount:\n--- before:\n%s\n--- after:\n%s", before, after)
			}
			if c.phrase == "" {
				return
			}
			errFile := "$M/error"
			if c.batchErr {
				errFile = "$M/ctl/batches/$N/error"
			}
			if e := m.ok(t, pre+`cat "`+errFile+`"`); !strings.Contains(e, c.phrase) {
				t.Errorf("%s = %q, want it to contain %q", errFile, e, c.phrase)
			}
			// The daemon logs the same text (slog's text handler escapes
			// quotes).
			quoted := strings.Trim(strconv.Quote(c.phrase), `"`)
			deadline := time.Now().Add(2 * time.Second)
			for {
				logged := m.logText()[logBefore:]
				if strings.Contains(logged, c.phrase) || strings.Contains(logged, quoted) {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("daemon log lacks %q; it logged:\n%s", c.phrase, logged)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	// The daemon survived all of it.
	if out := m.ok(t, `cat "$M/version"`); !strings.HasPrefix(out, "orbitefs ") {
		t.Errorf("/version after bad input: %q", out)
	}
}
