// enginejson.go owns the complete engine JSON document (the spec's
// EngineConfig::from_json): the engine keys under their spec names, the
// "runtime_queue" object and the "qos" section, on top of the defaults.
// It also loads the TOML's qos_file / qos_json into Engine.QoS.
//
// Invariants:
//   - A key left out keeps its default; unknown and duplicate keys are
//     errors; the result passes Validate or an error is returned.
//   - qos_file and qos_json are exclusive; each yields the same *QoS a
//     JSON engine document with the same "qos" section yields.

package config

import (
	"errors"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"
)

// EngineFromJSON reads a complete engine document (at most 1 MiB).
func EngineFromJSON(data []byte) (Engine, error) {
	e := DefaultEngine()
	if len(data) > MaxQoSDocumentBytes {
		return Engine{}, fmt.Errorf("engine document of %d bytes exceeds the 1MiB limit", len(data))
	}
	doc := struct {
		*Engine
		QoS jsontext.Value `json:"qos"`
	}{Engine: &e}
	if err := strictJSON(data, &doc); err != nil {
		return Engine{}, fmt.Errorf("engine document: %w", err)
	}
	q, err := parseQoSSection(doc.QoS)
	if err != nil {
		return Engine{}, err
	}
	e.QoS = q
	if err := e.Validate(); err != nil {
		return Engine{}, err
	}
	return e, nil
}

// EngineFromJSONFile is EngineFromJSON of a file.
func EngineFromJSONFile(path string) (Engine, error) {
	b, err := readLimited(path, MaxQoSDocumentBytes)
	if err != nil {
		return Engine{}, err
	}
	e, err := EngineFromJSON(b)
	if err != nil {
		return Engine{}, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

// loadQoS parses qos_file or qos_json into QoS.
func (c *Engine) loadQoS() error {
	switch {
	case c.QoSFile != "" && c.QoSJSON != "":
		return errors.New("invalid config: engine.qos_file and engine.qos_json are exclusive")
	case c.QoSFile != "":
		q, err := ParseQoSFile(c.QoSFile)
		if err != nil {
			return fmt.Errorf("config engine.qos_file: %w", err)
		}
		c.QoS = q
	case c.QoSJSON != "":
		q, err := ParseQoSJSON([]byte(c.QoSJSON))
		if err != nil {
			return fmt.Errorf("config engine.qos_json: %w", err)
		}
		c.QoS = q
	}
	return nil
}
