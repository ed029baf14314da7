package awsapi

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"regexp"
	"strings"
)

// SecretARN is the ARN of the local secret name, with the six-character
// suffix Secrets Manager appends.
func SecretARN(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "arn:aws:secretsmanager:" + Region + ":" + AccountID + ":secret:" + name + "-" + hex.EncodeToString(sum[:3])
}

// Version stages of a secret.
const (
	StageCurrent  = "AWSCURRENT"
	StagePrevious = "AWSPREVIOUS"
)

var arnSuffix = regexp.MustCompile(`-[A-Za-z0-9]{6}$`)

// secretName is the name in a secret's ARN, without its suffix.
func secretName(arn string) string {
	_, name, _ := strings.Cut(arn, ":secret:")
	return arnSuffix.ReplaceAllString(name, "")
}

// versionID is the id of one stage's version of a secret.
func versionID(arn, stage string) string {
	sum := sha256.Sum256([]byte(arn + "/" + stage))
	h := hex.EncodeToString(sum[:16])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// secret finds the secret id names: its ARN, or its name.
func (s *Server) secret(id string) (string, Secret, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec, ok := s.opts.Secrets[id]; ok {
		return id, sec, true
	}
	for arn, sec := range s.opts.Secrets {
		if secretName(arn) == id {
			return arn, sec, true
		}
	}
	return "", Secret{}, false
}

// AddSecret serves one more secret under arn, or replaces it.
func (s *Server) AddSecret(arn string, sec Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Secrets == nil {
		s.opts.Secrets = map[string]Secret{}
	}
	s.opts.Secrets[arn] = sec
}

// secretsManager serves GetSecretValue and DescribeSecret from
// Options.Secrets.
func (c *call) secretsManager() {
	var in struct {
		SecretID     string `json:"SecretId"`
		VersionID    string `json:"VersionId"`
		VersionStage string
	}
	switch c.op.op {
	case "GetSecretValue", "DescribeSecret":
	default:
		c.fail(http.StatusBadRequest, "UnknownOperationException", c.op.name+" is not served by the local AWS endpoint (Secrets Manager: GetSecretValue, DescribeSecret)")
		return
	}
	if !c.decode(&in) {
		return
	}
	arn, sec, found := c.secret(in.SecretID)
	resource := arn
	if !found {
		resource = in.SecretID
		if !strings.HasPrefix(resource, "arn:") {
			resource = "arn:aws:secretsmanager:" + Region + ":" + AccountID + ":secret:" + in.SecretID
		}
	}
	if !c.allowed(need{action: c.op.name, resource: resource}) {
		return
	}
	if !found {
		c.fail(http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
		return
	}
	stages := map[string]string{StageCurrent: sec.Current}
	if sec.Previous != "" {
		stages[StagePrevious] = sec.Previous
	}
	if c.op.op == "DescribeSecret" {
		ids := map[string][]string{}
		for stage := range stages {
			ids[versionID(arn, stage)] = []string{stage}
		}
		writeJSON(c.w, contentType(c.r), http.StatusOK, map[string]any{
			"ARN": arn, "Name": secretName(arn), "VersionIdsToStages": ids,
		})
		return
	}
	stage := in.VersionStage
	if in.VersionID != "" {
		stage = ""
		for st := range stages {
			if versionID(arn, st) == in.VersionID && (in.VersionStage == "" || in.VersionStage == st) {
				stage = st
			}
		}
		if stage == "" {
			c.fail(http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for VersionId: "+in.VersionID)
			return
		}
	}
	if stage == "" {
		stage = StageCurrent
	}
	value, ok := stages[stage]
	if !ok {
		c.fail(http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for staging label: "+stage)
		return
	}
	writeJSON(c.w, contentType(c.r), http.StatusOK, map[string]any{
		"ARN": arn, "Name": secretName(arn), "VersionId": versionID(arn, stage),
		"SecretString": value, "VersionStages": []string{stage},
	})
}
