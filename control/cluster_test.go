package control

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestClusterMetricsCoverStats: every count of ClusterStats has its one
// metric, named for its JSON key (counters with _total), showing the
// field's value.
func TestClusterMetricsCoverStats(t *testing.T) {
	var cs ClusterStats
	v := reflect.ValueOf(&cs).Elem()
	type field struct{ name, key, val string }
	var counts []field
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		val := ""
		switch f.Type.Kind() {
		case reflect.Bool:
			v.Field(i).SetBool(true)
			val = "1"
		case reflect.Int, reflect.Int64:
			v.Field(i).SetInt(int64(1000 + i))
			val = fmt.Sprint(1000 + i)
		case reflect.Uint64:
			v.Field(i).SetUint(uint64(1000 + i))
			val = fmt.Sprint(1000 + i)
		default:
			continue
		}
		counts = append(counts, field{f.Name, key, val})
	}
	out := "\n" + renderClusterMetrics(&cs)
	for _, c := range counts {
		if !strings.Contains(out, "\norbitefs_cluster_"+c.key+" "+c.val+"\n") && !strings.Contains(out, "\norbitefs_cluster_"+c.key+"_total "+c.val+"\n") {
			t.Errorf("no metric orbitefs_cluster_%s[_total] %s for ClusterStats.%s in:%s", c.key, c.val, c.name, out)
		}
	}
	if n := strings.Count(out, "# TYPE "); n != len(counts) {
		t.Errorf("%d metrics for %d counts of ClusterStats", n, len(counts))
	}
}
