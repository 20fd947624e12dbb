//! A well-formed component that is not a wasmprov plugin: it exports a
//! function of its own world and nothing of `wasmprov:provisioner`. The host
//! must refuse to load it, naming the file and the interface it expected.

wit_bindgen::generate!({
    inline: r#"
        package wasmprov-test:other-world@0.1.0;

        world greeter {
            export greet: func(name: string) -> string;
        }
    "#,
    world: "greeter",
});

struct Greeter;

impl Guest for Greeter {
    fn greet(name: String) -> String {
        format!("hello, {name}")
    }
}

export!(Greeter);
