// Command hello prints its build tag's word, for testkit's Build test.
package main

import "fmt"

func main() { fmt.Println(word) }
