// Package lib is a tiny package for apicheck's test: one of each kind of
// exported name.
package lib

import (
	"io"
	"time"
)

const Answer = 42

const Share = 0.05

const Wait time.Duration = 3 * time.Second

type Kind uint8

const KindA Kind = 1

var ErrNone error

// Greet greets.
func Greet(name string, extra ...int) (string, error) { return name, nil }

func Max[T int | float64](a, b T) T { return max(a, b) }

type Base struct{ ID string }

func (Base) Name() string { return "" }

type Thing struct {
	Base
	At    time.Time
	Count int
	note  string
}

func (t *Thing) Set(n int) { t.Count = n }

func (t Thing) Note() string { return t.note }

func (t *Thing) hidden() {}

type Reader interface {
	io.Reader
	Kind() Kind
}

type Alias = Thing
